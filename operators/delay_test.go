package operators_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func TestDelayHoldsEachItem(t *testing.T) {
	const d = 40 * time.Millisecond
	var mu sync.Mutex
	var early []time.Duration
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Delay(p.Source(), d), func(_ context.Context, m *ports.Delivery) error {
			if waited := time.Since(m.ReceivedAt); waited < d {
				mu.Lock()
				early = append(early, waited)
				mu.Unlock()
			}
			return nil
		})
	})
	ds := msgs(5)
	for _, m := range ds {
		m.ReceivedAt = time.Now()
	}
	r.f.push(ds...)
	for _, s := range r.f.waitSettled(t, 5) {
		if s.disp.Action != ports.Ack {
			t.Fatalf("settled %v, want ACK", s.disp.Action)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("items handled after %v, before the %v delay", early, d)
	}
}

func TestDelayUntilOrdersByDeadline(t *testing.T) {
	base := time.Now().Add(30 * time.Millisecond)
	at := map[string]time.Time{"c": base.Add(20 * time.Millisecond), "a": base, "b": base.Add(10 * time.Millisecond)}
	got := make(chan string, 3)
	seen := make(chan struct{}, 3)
	newRig(t, spec, func(p *flow.Pipeline) {
		delayed := operators.DelayUntil(tap(p.Source(), seen), func(it flow.Item[*ports.Delivery]) time.Time { return at[string(it.Value.Payload)] })
		flow.Sink(delayed, func(_ context.Context, m *ports.Delivery) error { got <- string(m.Payload); return nil })
	}).f.push(msg("c", ""), msg("a", ""), msg("b", ""))
	for _, want := range []string{"a", "b", "c"} {
		if v := recv(t, got, "a delayed item"); v != want {
			t.Fatalf("got %q, want %q (deadline order)", v, want)
		}
	}
}

func TestDelayCancelHeldItemsOnStop(t *testing.T) {
	sp := spec
	sp.InFlight = 5000
	seen := make(chan struct{}, 5000)
	r := newRig(t, sp, func(p *flow.Pipeline) {
		flow.Sink(operators.Delay(tap(p.Source(), seen), time.Hour), func(context.Context, *ports.Delivery) error {
			t.Error("a held item was handled")
			return nil
		})
	})
	r.f.push(msgs(5000)...)
	waitN(t, seen, 5000, "items reaching the delay")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("stop settled %d held items", len(s))
	}
	for _, e := range r.outcomes() {
		if e.Outcome.Kind != flow.Cancelled {
			t.Fatalf("held item ended %v, want cancelled", e.Outcome.Kind)
		}
	}
}

func TestDelayDrainsHeldItemsWhenInputCloses(t *testing.T) {
	seen := make(chan struct{}, 3)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Delay(tap(p.Source(), seen), 30*time.Millisecond), func(context.Context, *ports.Delivery) error { return nil })
	})
	r.f.push(msgs(3)...)
	waitN(t, seen, 3, "items reaching the delay")
	r.stop(t, true)
	if s := r.f.settlements(); len(s) != 3 {
		t.Fatalf("%d settled, want the 3 held items handled within the drain", len(s))
	}
}

func TestDelayUntilPanicFailsItem(t *testing.T) {
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.DelayUntil(p.Source(), func(flow.Item[*ports.Delivery]) time.Time { panic("no time") }),
			func(context.Context, *ports.Delivery) error { return nil })
	})
	r.f.push(msg("a", ""))
	var pe *ports.PanicError
	if d := r.f.waitSettled(t, 1)[0].disp; d.Action != ports.Requeue || !errors.As(d.Reason, &pe) {
		t.Fatalf("settled %+v, want REQUEUE with a PanicError", d)
	}
}
