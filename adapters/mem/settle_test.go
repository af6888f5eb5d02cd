package mem_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

func TestAckRemoves(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "1", "2")
	ds := receive(t, s, 2)
	settle(t, s, ack, ds...) // one outcome for a batch
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 || q.InFlight != 0 {
		t.Fatalf("stats after ack %+v, want empty", q)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := subscribe(t, newAdapter(t, b), lb("orders", "g"))
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 {
		t.Fatalf("acked messages came back: %+v", q)
	}
	receiveBlocked(t, s2)
}

func TestRequeueCountsExactlyAndGoesToTheBack(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "a", "b")

	d := receive(t, s, 1)[0]
	for want := 1; want <= 3; want++ {
		settle(t, s, requeue, d)
		ds := receive(t, s, 2)
		if got := payloads(ds); want == 1 && !slices.Equal(got, []string{"b", "a"}) {
			t.Fatalf("after requeue got %v, want the requeued message behind [b a]", got)
		}
		i := slices.IndexFunc(ds, func(x *ports.Delivery) bool { return string(x.Payload) == "a" })
		if ds[i].RedeliveryCount != want {
			t.Fatalf("RedeliveryCount = %d after %d requeues", ds[i].RedeliveryCount, want)
		}
		if ds[i].ID != d.ID {
			t.Fatalf("ID changed on redelivery: %q -> %q", d.ID, ds[i].ID)
		}
		other := ds[1-i]
		settle(t, s, requeue, other)
		d = ds[i]
	}
}

func TestRequeueWithDelay(t *testing.T) {
	clock := newManualClock()
	b := newBroker(t, mem.WithClock(clock))
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "x")
	d := receive(t, s, 1)[0]

	settle(t, s, ports.Disposition{Action: ports.Requeue, Delay: 10 * time.Second, Reason: errors.New("busy")}, d)
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 || q.Delayed != 1 || q.InFlight != 0 {
		t.Fatalf("stats right after a delayed requeue %+v, want 1 delayed", q)
	}
	clock.Advance(10*time.Second - time.Nanosecond)
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 {
		t.Fatalf("redelivered before the delay passed: %+v", q)
	}
	clock.Advance(time.Nanosecond)
	if q := queueStats(t, b, "orders", "g"); q.Ready != 1 || q.Delayed != 0 {
		t.Fatalf("stats when the delay passed %+v, want 1 ready", q)
	}
	if d := receive(t, s, 1)[0]; d.RedeliveryCount != 1 {
		t.Fatalf("RedeliveryCount = %d, want 1", d.RedeliveryCount)
	}
}

func TestSettleTwiceIsAnError(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "x")
	d := receive(t, s, 1)[0]
	settle(t, s, ack, d)
	for _, disp := range []ports.Disposition{ack, requeue, {Action: ports.DeadLetter}} {
		err := s.Settle(context.Background(), []*ports.Delivery{d}, disp)
		if !errors.Is(err, portable.ErrAlreadySettled) || !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("second settle %v: %v, want ErrAlreadySettled", disp.Action, err)
		}
	}
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 {
		t.Fatalf("second settlement requeued: %+v", q)
	}
}

func TestSettleForeignDelivery(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s1 := subscribe(t, a, lb("orders", "g1"))
	s2 := subscribe(t, a, lb("orders", "g2"))
	send(t, a, "orders", "x")
	d1 := receive(t, s1, 1)[0]
	d2 := receive(t, s2, 1)[0]

	copied := *d1
	for name, ds := range map[string][]*ports.Delivery{
		"other subscription's": {d2},
		"hand-built":           {{Message: ports.Message{Topic: "orders"}}},
		"copied":               {&copied},
		"nil":                  {nil},
		"batch with one bad":   {d1, d2},
	} {
		err := s1.Settle(context.Background(), ds, ack)
		if !errors.Is(err, portable.ErrForeignDelivery) || !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s delivery: %v, want ErrForeignDelivery", name, err)
		}
	}
	// Nothing was settled: both are still in flight and can be settled.
	if q := queueStats(t, b, "orders", "g1"); q.InFlight != 1 {
		t.Fatalf("g1 stats %+v, want 1 in flight", q)
	}
	settle(t, s1, ack, d1)
	settle(t, s2, ack, d2)
}

func TestSettleDuplicateInOneBatch(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "x", "y")
	ds := receive(t, s, 2)
	err := s.Settle(context.Background(), []*ports.Delivery{ds[0], ds[1], ds[0]}, requeue)
	if !errors.Is(err, portable.ErrAlreadySettled) {
		t.Fatalf("duplicate in batch: %v, want ErrAlreadySettled", err)
	}
	if q := queueStats(t, b, "orders", "g"); q.InFlight != 2 || q.Ready != 0 {
		t.Fatalf("stats %+v, want both still in flight", q)
	}
	settle(t, s, ack, ds...)
}

func TestSettleInvalidDisposition(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "x")
	d := receive(t, s, 1)[0]
	for _, disp := range []ports.Disposition{{}, {Action: 99}, {Action: ports.Requeue, Delay: -1}} {
		if err := s.Settle(context.Background(), []*ports.Delivery{d}, disp); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Settle(%+v): %v, want ErrInvalid", disp, err)
		}
	}
	settle(t, s, ack, d)
	if err := s.Settle(context.Background(), nil, ack); err != nil {
		t.Errorf("empty Settle: %v, want nil", err)
	}
}

func TestSettleContextAndStop(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "x")
	d := receive(t, s, 1)[0]

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Settle(ctx, []*ports.Delivery{d}, ack); !errors.Is(err, context.Canceled) {
		t.Fatalf("Settle with a done ctx: %v, want context.Canceled", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(context.Background(), []*ports.Delivery{d}, ack); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Settle after Stop: %v, want ErrClosed", err)
	}
	if q := queueStats(t, b, "orders", "g"); q.Ready != 1 || q.InFlight != 0 {
		t.Fatalf("stats %+v, want the message back and unsettled", q)
	}
}
