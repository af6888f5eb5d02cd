package flow

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// callsSub records its Settle calls; flushing makes it a ports.Flusher.
type callsSub struct {
	ports.Subscription // nil: only Settle (and Flush) are called
	mu                 sync.Mutex
	calls              [][]string // ids per call
}

func (s *callsSub) Settle(_ context.Context, ds []*ports.Delivery, _ ports.Disposition) error {
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	s.mu.Lock()
	s.calls = append(s.calls, ids)
	s.mu.Unlock()
	return nil
}

type flushingCallsSub struct{ *callsSub }

func (flushingCallsSub) Flush(context.Context) error { return nil }

// fullWindow returns an engine, not running, of a pipeline whose window of
// two slots is taken by two completed, unsettled deliveries: with the
// engine's loop stopped, only settleHere can settle them.
func fullWindow(t *testing.T, sub ports.Subscription, disps ...ports.Disposition) (*Pipeline, *engine) {
	t.Helper()
	p := New(nil, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 2})
	p.sub, p.slots, p.settleC = sub, newSlots(2), context.Background()
	e := newEngine(p, sub)
	p.eng = e
	if n, err := p.slots.acquire(context.Background(), 2, nil); n != 2 || err != nil {
		t.Fatalf("acquire = %d, %v: want the whole window", n, err)
	}
	e.handed(2)
	for i, d := range disps {
		r := &root{p: p}
		r.one[0] = &ports.Delivery{ID: string(rune('a' + i))}
		r.me[0] = r
		if !e.enqueue(r.me[:], d) {
			t.Fatal("enqueue refused before close")
		}
	}
	return p, e
}

// When the window is full and the pending ACK round would go now (no
// call running, or nothing more coming), the receive loop carries it out
// itself: acquire returns with slots although the engine's loop never
// ran, in one call (also for a ports.Flusher, whose ACK calls stay one at
// a time).
func TestFullWindowIsSettledByTheReceiveLoop(t *testing.T) {
	ack := ports.Disposition{Action: ports.Ack}
	for _, c := range []struct {
		flusher, running bool
	}{{false, false}, {true, false}, {false, true}} {
		cs := &callsSub{}
		var sub ports.Subscription = cs
		if c.flusher {
			sub = flushingCallsSub{cs}
		}
		p, e := fullWindow(t, sub, ack, ack)
		if c.running { // another call is running, but no delivery is being handled: the round goes now
			e.running.Add(1)
			e.concurrency <- struct{}{}
			e.linger = time.Hour
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := p.slots.acquire(ctx, 2, e.settleHere)
		cancel()
		if err != nil || n != 2 {
			t.Fatalf("%+v: acquire = %d, %v: want both slots back from the receive loop's own Settle call", c, n, err)
		}
		if len(cs.calls) != 1 || len(cs.calls[0]) != 2 {
			t.Fatalf("%+v: Settle calls %v: want one call with both deliveries", c, cs.calls)
		}
		if want := int64(len(e.concurrency)); e.running.Load() != want || !c.running && want != 0 {
			t.Fatalf("%+v: after the call %d running, %d tokens taken: want none but the other call's", c, e.running.Load(), want)
		}
	}
}

// The receive loop leaves a round to the engine when the round is
// gathering more (a call is running, a delivery is still being handled,
// the linger has not passed), when every call token is taken, when the
// round holds another disposition (a requeue or dead letter may wait for
// the broker), and once the engine closes.
func TestReceiveLoopLeavesOtherRoundsToTheEngine(t *testing.T) {
	ack := ports.Disposition{Action: ports.Ack}
	requeue := ports.Disposition{Action: ports.Requeue}
	for _, c := range []struct {
		name  string
		disps []ports.Disposition
		setup func(*engine)
	}{
		{"gathering", []ports.Disposition{ack, ack}, func(e *engine) {
			e.running.Add(1)
			e.active.Add(1)
			e.linger, e.maxBatch = time.Hour, 10
		}},
		{"every call token taken", []ports.Disposition{ack, ack}, func(e *engine) {
			for range cap(e.concurrency) {
				e.concurrency <- struct{}{}
			}
		}},
		{"a requeue in the round", []ports.Disposition{ack, requeue}, func(*engine) {}},
		{"closing", []ports.Disposition{ack, ack}, func(e *engine) { e.closing = true }},
	} {
		cs := &callsSub{}
		_, e := fullWindow(t, cs, c.disps...)
		c.setup(e)
		if e.settleHere() {
			t.Errorf("%s: the receive loop settled the round", c.name)
		}
		if len(cs.calls) != 0 {
			t.Errorf("%s: Settle calls %v: want none", c.name, cs.calls)
		}
		if e.n != 2 {
			t.Errorf("%s: %d deliveries pending: want both left to the engine", c.name, e.n)
		}
	}
}

// Before a receive that would get less than half the window, the receive
// loop settles the pending ACK round of a subscription that defers its
// ACKs (ports.Flusher), unless an ACK call is under way (it does not wait
// for one); another subscription's round is left to the engine.
func TestReceiveLoopSettlesDeferredAcksAhead(t *testing.T) {
	ack := ports.Disposition{Action: ports.Ack}
	for _, c := range []struct {
		name     string
		flusher  bool
		callOut  bool
		released int // slots released before, of the two taken
		settled  bool
	}{
		{"flusher, full window", true, false, 0, true},
		{"flusher, an ACK call under way", true, true, 0, false},
		{"flusher, half the window free", true, false, 1, false},
		{"not a flusher", false, false, 0, false},
	} {
		cs := &callsSub{}
		var sub ports.Subscription = cs
		if c.flusher {
			sub = flushingCallsSub{cs}
		}
		p, e := fullWindow(t, sub, ack, ack)
		p.slots.release(c.released)
		if c.callOut {
			e.ackCall.Lock()
		}
		p.settleAhead() // returns without waiting, or the test times out
		if c.callOut {
			e.ackCall.Unlock()
		}
		if got := len(cs.calls) == 1; got != c.settled {
			t.Errorf("%s: Settle calls %v: want settled %v", c.name, cs.calls, c.settled)
		}
		if want := 2 - c.released; c.settled {
			if free := p.slots.free(); free != 2 {
				t.Errorf("%s: %d slots free after the round: want 2", c.name, free)
			}
		} else if free := p.slots.free(); free != 2-want {
			t.Errorf("%s: %d slots free: want %d (nothing settled)", c.name, free, 2-want)
		}
		if len(e.concurrency) != 0 {
			t.Errorf("%s: %d call tokens still taken", c.name, len(e.concurrency))
		}
	}
}
