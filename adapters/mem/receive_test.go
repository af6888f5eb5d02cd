package mem_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

func TestRoundTrip(t *testing.T) {
	clock := newManualClock()
	b := newBroker(t, mem.WithClock(clock))
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "billing"))

	h := ports.NewHeaders(
		ports.HeaderType, "order.paid.v1",
		ports.HeaderRequestID, "req-1",
		ports.HeaderTenantID, "t-1",
		ports.HeaderCorrelationID, "c-1",
		ports.HeaderCausationID, "m-0",
		ports.HeaderTraceParent, "00-abc-def-01",
	)
	if err := a.Send(context.Background(), ports.Message{Topic: "orders", Key: "o-7", Payload: []byte(`{"id":7}`), Headers: h}); err != nil {
		t.Fatal(err)
	}
	d := receive(t, s, 1)[0]
	if d.Topic != "orders" || d.Key != "o-7" || string(d.Payload) != `{"id":7}` || d.Delay != 0 {
		t.Errorf("delivery message = %+v", d.Message)
	}
	for _, hdr := range h {
		k, v := hdr.Name, hdr.Value
		if d.Headers.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, d.Headers.Get(k), v)
		}
	}
	if d.RedeliveryCount != 0 {
		t.Errorf("RedeliveryCount = %d, want 0", d.RedeliveryCount)
	}
	if !d.ReceivedAt.Equal(clock.Now()) {
		t.Errorf("ReceivedAt = %v, want the clock's %v", d.ReceivedAt, clock.Now())
	}
	if d.Facts.Get("queue") != "orders/billing" || d.Facts.Get("mode") != "LOAD_BALANCE" {
		t.Errorf("Facts = %v", d.Facts)
	}
	if d.Handle == nil {
		t.Error("Handle is nil")
	}
	settle(t, s, ack, d)
}

func TestReceiveIsFIFOAndBoundedByMax(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "1", "2", "3", "4", "5")

	ds, err := s.Receive(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	rest := receive(t, s, 3)
	if got := payloads(append(ds, rest...)); !slices.Equal(got, []string{"1", "2", "3", "4", "5"}) {
		t.Fatalf("order = %v, want publish order", got)
	}
	if len(ds) != 2 {
		t.Fatalf("Receive(max 2) returned %d", len(ds))
	}
}

func TestReceiveRespectsInFlight(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	spec := lb("orders", "g")
	spec.InFlight = 3
	s := subscribe(t, a, spec)
	send(t, a, "orders", "1", "2", "3", "4", "5")

	ds, err := s.Receive(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 3 {
		t.Fatalf("Receive(10) with InFlight 3 returned %d deliveries", len(ds))
	}
	if q := queueStats(t, b, "orders", "g"); q.InFlight != 3 || q.Ready != 2 {
		t.Fatalf("stats %+v, want 3 in flight and 2 ready", q)
	}
	receiveBlocked(t, s)

	// A settlement frees a slot and wakes a blocked Receive.
	got := make(chan []*ports.Delivery, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		ds, _ := s.Receive(ctx, 10)
		got <- ds
	}()
	settle(t, s, ack, ds[0])
	more := <-got
	if len(more) != 1 || string(more[0].Payload) != "4" {
		t.Fatalf("after one ack got %v, want [4]", payloads(more))
	}
}

func TestReceiveWaitsForPublish(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	got := make(chan []*ports.Delivery, 1)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		ds, err := s.Receive(ctx, 5)
		errc <- err
		got <- ds
	}()
	waitForWaiting(t, b, "orders", "g", 1)
	send(t, a, "orders", "x")
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if ds := <-got; len(ds) != 1 || string(ds[0].Payload) != "x" {
		t.Fatalf("got %v", payloads(ds))
	}
}

func TestReceiveContext(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	send(t, a, "orders", "ready")
	if _, err := s.Receive(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive with a done ctx: %v, want context.Canceled", err)
	}

	receive(t, s, 1)
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := s.Receive(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked Receive: %v, want DeadlineExceeded", err)
	}
	// The cancelled waiter left no trace: a later publish is still received.
	send(t, a, "orders", "after")
	if got := payloads(receive(t, s, 1)); got[0] != "after" {
		t.Fatalf("got %v", got)
	}
}

func TestReceiveInvalidMax(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	if _, err := s.Receive(context.Background(), 0); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Receive(0): %v, want ErrInvalid", err)
	}
}

func TestStopWakesReceive(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, err := s.Receive(ctx, 1)
		errc <- err
	}()
	waitForWaiting(t, b, "orders", "g", 1)
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("blocked Receive after Stop: %v, want ErrClosed", err)
	}
	if _, err := s.Receive(context.Background(), 1); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Receive after Stop: %v, want ErrClosed", err)
	}
}

// TestCompetingReceiversShareReadyMessages: consumers blocked in Receive
// when a burst becomes ready each get a fair share, not whatever the first
// one to wake can hold. The burst is made atomic by a Stop that hands ten
// unsettled deliveries back at once.
func TestCompetingReceiversShareReadyMessages(t *testing.T) {
	b := newBroker(t)
	first := subscribe(t, newAdapter(t, b), lb("orders", "g"))
	send(t, newAdapter(t, b), "orders", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10")
	receive(t, first, 10)

	got := make(chan int, 2)
	for range 2 {
		s := subscribe(t, newAdapter(t, b), lb("orders", "g"))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			ds, _ := s.Receive(ctx, 64)
			got <- len(ds)
		}()
	}
	waitForWaiting(t, b, "orders", "g", 2)
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n1, n2 := <-got, <-got; n1 != 5 || n2 != 5 {
		t.Fatalf("two waiting consumers received %d and %d of 10, want 5 each", n1, n2)
	}
	if q := queueStats(t, b, "orders", "g"); q.Waiting != 0 || q.InFlight != 10 {
		t.Fatalf("stats %+v, want nobody waiting and 10 in flight", q)
	}
}
