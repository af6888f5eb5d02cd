package mqtt

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/sluicemq/sluice/ports"
)

// nopSession is a session manager that only records that Ack was not used.
type nopSession struct{ session.SessionManager }

func (nopSession) Ack(*packets.Publish) error { return errors.New("paho's Ack must not be used") }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestAckSessionWritesPUBACKsInArrivalOrder(t *testing.T) {
	s := newAckSession(nopSession{})
	var w syncBuffer
	s.newGeneration(&w)
	t1, t2, t3 := s.arrived(7, 1), s.arrived(3, 1), s.arrived(9, 1)
	if err := s.release(t3); err != nil {
		t.Fatal(err)
	}
	if err := s.release(t2); err != nil {
		t.Fatal(err)
	}
	if w.b.Len() != 0 || s.heldBack() != 2 {
		t.Fatalf("wrote %x with the head unacknowledged (held back %d)", w.b.Bytes(), s.heldBack())
	}
	if err := s.release(t1); err != nil {
		t.Fatal(err)
	}
	want := []byte{0x40, 2, 0, 7, 0x40, 2, 0, 3, 0x40, 2, 0, 9}
	if !bytes.Equal(w.b.Bytes(), want) {
		t.Fatalf("wrote %x, want %x", w.b.Bytes(), want)
	}
	old := s.arrived(11, 1)
	s.newGeneration(&w) // reconnect
	if err := s.release(old); !errors.Is(err, errConnectionGone) {
		t.Fatalf("release on a previous connection returned %v, want errConnectionGone", err)
	}
	if err := s.release(s.arrived(0, 0)); err != nil {
		t.Fatalf("QoS 0 release: %v", err)
	}
}

func TestFromURL(t *testing.T) {
	o, err := FromURL("mqtt://u:p@127.0.0.1:1883/billing?instance=pod-0&session_expiry=2h&leave_group_on_stop=true")
	if err != nil {
		t.Fatal(err)
	}
	if o.URL != "mqtt://127.0.0.1:1883" || o.Username != "u" || o.Password != "p" || o.Namespace != "billing" ||
		o.Instance != "pod-0" || o.SessionExpiry != 2*time.Hour || !o.LeaveGroupOnStop {
		t.Fatalf("parsed %+v", o)
	}
	if o, err := FromURL("mqtt+embedded://"); err != nil || !o.Embedded {
		t.Fatalf("embedded URL: %+v %v", o, err)
	}
	for _, bad := range []string{"amqp://x", "mqtt://h?session_expiry=soon"} {
		if _, err := FromURL(bad); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("FromURL(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := New(context.Background(), Options{URL: "mqtt://h:1", Namespace: "a/b"}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("namespace with '/' accepted: %v", err)
	}
}

func TestPhysicalNames(t *testing.T) {
	spec := ports.SubscriptionSpec{Topic: "orders.paid", Group: "billing"}
	if got := subscriptionFilter("ns", spec); got != "$share/billing/ns/orders.paid" {
		t.Errorf("load-balance filter %q", got)
	}
	if got := physicalTopic("ns", ports.DeadLetterTopic("orders.paid")); got != "ns/orders.paid/dlq" {
		t.Errorf("dead-letter topic %q", got)
	}
	spec.Mode = ports.Broadcast
	if got := subscriptionFilter("ns", spec); got != "ns/orders.paid" {
		t.Errorf("broadcast filter %q", got)
	}
}

func FuzzDeliverAt(f *testing.F) {
	for _, s := range []string{"", "1700000000000", "-1", "abc", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		at, err := deliverAtOf(ports.Headers{HeaderDeliverAt: s})
		if err != nil {
			var he *ports.HeaderError
			if !errors.As(err, &he) || !ports.IsPoison(err) {
				t.Fatalf("error %v is not a poison HeaderError", err)
			}
			return
		}
		if s != "" && at.IsZero() && s != "0" {
			t.Fatalf("%q parsed to zero without error", s)
		}
	})
}
