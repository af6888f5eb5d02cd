package mem

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// TestStopBetweenChunksOfAReceive stops a subscription while its receive
// has let go of the queue's lock between two chunks: the receive returns
// ErrClosed and hands out nothing, and every message is back in the
// queue, the ones it had taken counted as redelivered.
func TestStopBetweenChunksOfAReceive(t *testing.T) {
	ctx := context.Background()
	b, err := NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	a, err := New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	spec := ports.SubscriptionSpec{Topic: "orders", Group: "g", InFlight: 100}
	ds, err := a.c.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	s := ds.(*subscription)
	const n = 3*takeChunk + 1
	for i := range n {
		if err := a.Send(ctx, ports.Message{Topic: "orders", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	chunks := 0
	s.betweenChunks = func() {
		if chunks++; chunks == 2 { // two chunks taken
			if err := s.Close(ctx); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	}
	recs, err := s.ReceiveBatch(ctx, n)
	if !errors.Is(err, ports.ErrClosed) || len(recs) != 0 {
		t.Fatalf("ReceiveBatch = %d records, %v; want none, ErrClosed", len(recs), err)
	}
	q, _ := b.Stats().Queue("", "orders", "g", "")
	if q.Ready != n || q.InFlight != 0 {
		t.Fatalf("queue holds %d ready and %d in flight; want all %d ready", q.Ready, q.InFlight, n)
	}
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	for i := range n {
		it := s.q.ready.PopFront()
		want := 0
		if i < 2*takeChunk {
			want = 1
		}
		if string(it.msg.payload) != fmt.Sprint(i) || it.redeliveries != want {
			t.Fatalf("message %d: payload %q, %d redeliveries; want %q, %d", i, it.msg.payload, it.redeliveries, fmt.Sprint(i), want)
		}
	}
}
