package mqtt

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/sluicemq/sluice/ports"
)

// nopSession is a session manager whose Ack must not be used.
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

var errGone = errors.New("the connection that received this delivery is closed")

func heldBack(s *ackSession) int {
	n := 0
	for _, slot := range s.order {
		if slot.released {
			n++
		}
	}
	return n
}

// release releases one ticket; errGone when its connection is closed.
func release(s *ackSession, t ackTicket) error {
	var gone [1]bool
	err := s.releaseAll([]ackTicket{t}, gone[:])
	if gone[0] {
		return errGone
	}
	return err
}

func TestAckSessionWritesPUBACKsInArrivalOrder(t *testing.T) {
	s := newAckSession(nopSession{})
	var w syncBuffer
	s.newGeneration(&w)
	t1, t2, t3 := s.arrived(7, 1), s.arrived(3, 1), s.arrived(9, 1)
	if err := release(s, t3); err != nil {
		t.Fatal(err)
	}
	if err := release(s, t2); err != nil {
		t.Fatal(err)
	}
	if w.b.Len() != 0 || heldBack(s) != 2 {
		t.Fatalf("wrote %x with the head unacknowledged (held back %d)", w.b.Bytes(), heldBack(s))
	}
	if err := release(s, t1); err != nil {
		t.Fatal(err)
	}
	want := []byte{0x40, 2, 0, 7, 0x40, 2, 0, 3, 0x40, 2, 0, 9}
	if !bytes.Equal(w.b.Bytes(), want) {
		t.Fatalf("wrote %x, want %x", w.b.Bytes(), want)
	}
	old := s.arrived(11, 1)
	s.newGeneration(&w) // reconnect
	if err := release(s, old); !errors.Is(err, errGone) {
		t.Fatalf("release on a previous connection returned %v, want errGone", err)
	}
	if err := release(s, s.arrived(0, 0)); err != nil {
		t.Fatalf("QoS 0 release: %v", err)
	}
}

func TestInvalidNamespace(t *testing.T) {
	if _, err := New(context.Background(), Options{URL: "mqtt://h:1", Namespace: "a/b"}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("namespace with '/' accepted: %v", err)
	}
}

func TestPhysicalNames(t *testing.T) {
	c := &conn{opts: Options{Namespace: "ns"}}
	spec := ports.SubscriptionSpec{Topic: "orders.paid", Group: "billing"}
	if got := c.filter(spec); got != "$share/billing/ns/orders.paid" {
		t.Errorf("load-balance filter %q", got)
	}
	if got := physicalTopic("ns", ports.DeadLetterTopic("orders.paid")); got != "ns/orders.paid/dlq" {
		t.Errorf("dead-letter topic %q", got)
	}
	spec.Mode = ports.Broadcast
	if got := c.filter(spec); got != "ns/orders.paid" {
		t.Errorf("broadcast filter %q", got)
	}
}
