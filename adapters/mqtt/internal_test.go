package mqtt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/sluicemq/sluice/ports"
)

// stubSession is paho's session state reduced to nothing; its Ack must
// not be used.
type stubSession struct{ session.SessionManager }

func (stubSession) Ack(*packets.Publish) error { return errors.New("paho's Ack must not be used") }

func (stubSession) ConAckReceived(io.Writer, *packets.Connect, *packets.Connack) error { return nil }

func (stubSession) ConnectionLost(*packets.Disconnect) error { return nil }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.b.Bytes())
}

// arrive delivers a PUBLISH of message id with packet id pid to s and
// returns the handle it was handed out with (nil when it was not).
func arrive(t *testing.T, s *subscription, id string, pid uint16, qos byte, dup bool) any {
	t.Helper()
	p := paho.PublishFromPacketPublish(&packets.Publish{PacketID: pid, QoS: qos, Duplicate: dup, Topic: "ns/t",
		Properties: &packets.Properties{User: []packets.User{{Key: ports.HeaderID, Value: id}}}})
	if _, err := s.onPublish(paho.PublishReceived{Packet: p}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	recs, err := s.ReceiveBatch(ctx, 1)
	if err != nil {
		return nil
	}
	return recs[0].Handle
}

func TestPUBACKsInArrivalOrderOnTheirConnection(t *testing.T) {
	s := &subscription{c: &conn{}, byID: map[string]*entry{}, signal: make(chan struct{}, 1)}
	s.dead, s.kill = context.WithCancelCause(context.Background())
	sess := ackSession{stubSession{}, s}
	if err := sess.Ack(nil); err != nil {
		t.Fatalf("paho's Ack reached the session state: %v", err)
	}
	var w1, w2 syncBuffer
	_ = sess.ConAckReceived(&w1, nil, nil)
	h1, h2, h3 := arrive(t, s, "a", 7, 1, false), arrive(t, s, "b", 3, 1, false), arrive(t, s, "c", 9, 1, false)
	_ = s.SendAcks(context.Background(), []any{h3})
	_ = s.SendAcks(context.Background(), []any{h2})
	if len(w1.Bytes()) != 0 || len(s.order) != 3 {
		t.Fatalf("wrote %x with the head unacknowledged", w1.Bytes())
	}
	_ = s.SendAcks(context.Background(), []any{h1})
	if want := []byte{0x40, 2, 0, 7, 0x40, 2, 0, 3, 0x40, 2, 0, 9}; !bytes.Equal(w1.Bytes(), want) {
		t.Fatalf("wrote %x, want %x", w1.Bytes(), want)
	}

	// Acked after its connection closed: the DUP copy on the next one is
	// PUBACKed with its own packet id, and not handed out again.
	h4 := arrive(t, s, "d", 11, 1, false)
	_ = sess.ConnectionLost(nil)
	_ = sess.ConAckReceived(&w2, nil, nil)
	_ = s.SendAcks(context.Background(), []any{h4})
	if len(w2.Bytes()) != 0 || len(w1.Bytes()) != 12 {
		t.Fatalf("PUBACK of a closed connection's delivery written: %x, %x", w1.Bytes(), w2.Bytes())
	}
	if h := arrive(t, s, "d", 5, 1, true); h != nil {
		t.Fatal("the DUP copy of an acknowledged delivery was handed out again")
	}
	if want := []byte{0x40, 2, 0, 5}; !bytes.Equal(w2.Bytes(), want) {
		t.Fatalf("wrote %x for the DUP copy, want %x", w2.Bytes(), want)
	}
	_ = s.SendAcks(context.Background(), []any{arrive(t, s, "e", 0, 0, false)})
	if len(w2.Bytes()) != 4 || len(s.byID) != 0 {
		t.Fatalf("a QoS 0 delivery was PUBACKed (%x) or kept (%d)", w2.Bytes(), len(s.byID))
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

// closeCounter is a connection that counts its closes.
type closeCounter struct {
	syncBuffer
	closes chan time.Time
}

func (c *closeCounter) Close() error { c.closes <- time.Now(); return nil }

func TestAbandonClosesEachConnectionOnceAndNotAtOnce(t *testing.T) {
	defer func(d time.Duration) { recycleAfter = d }(recycleAfter)
	recycleAfter = 200 * time.Millisecond
	s := &subscription{c: &conn{}, byID: map[string]*entry{}, signal: make(chan struct{}, 1)}
	s.dead, s.kill = context.WithCancelCause(context.Background())
	sess := ackSession{stubSession{}, s}
	w1 := &closeCounter{closes: make(chan time.Time, 8)}
	w2 := &closeCounter{closes: make(chan time.Time, 8)}
	up := time.Now()
	_ = sess.ConAckReceived(w1, nil, nil)
	for i, id := range []string{"a", "b", "c"} { // three failed settlements in a row
		s.Abandon([]any{arrive(t, s, id, uint16(i+1), 1, false)})
	}
	closed := waitClose(t, w1)
	if d := closed.Sub(up); d < recycleAfter {
		t.Fatalf("the connection was closed %v after it came up, want no sooner than %v", d, recycleAfter)
	}
	if len(s.byID) != 0 {
		t.Fatalf("%d abandoned entries kept", len(s.byID))
	}

	_ = sess.ConnectionLost(nil)
	up = time.Now()
	_ = sess.ConAckReceived(w2, nil, nil)
	s.Abandon([]any{arrive(t, s, "d", 4, 1, false)})
	if d := waitClose(t, w2).Sub(up); d < recycleAfter {
		t.Fatalf("the next connection was closed %v after it came up, want no sooner than %v", d, recycleAfter)
	}
	if n := len(w1.closes); n != 0 {
		t.Fatalf("the first connection was closed %d more times: one close per connection is enough", n)
	}
}

func waitClose(t *testing.T, c *closeCounter) time.Time {
	t.Helper()
	select {
	case at := <-c.closes:
		return at
	case <-time.After(10 * time.Second):
		t.Fatal("Abandon did not close the connection within 10s")
		return time.Time{}
	}
}
