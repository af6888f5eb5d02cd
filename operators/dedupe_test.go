package operators_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func dup(d *ports.Delivery) *ports.Delivery {
	c := *d
	c.RedeliveryCount++
	return &c
}

func TestDedupeAcksDuplicatesOfHandledMessages(t *testing.T) {
	var handled atomic.Int32
	store := operators.NewMemoryStore(operators.MemoryStoreOptions{})
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Dedupe(p.Source(), operators.DedupeOptions[*ports.Delivery]{Store: store}),
			func(context.Context, *ports.Delivery) error { handled.Add(1); return nil })
	})
	a := msg("a", "")
	r.f.push(a)
	r.f.waitSettled(t, 1)
	r.f.push(dup(a), dup(a))
	for _, s := range r.f.waitSettled(t, 3) {
		if s.disp.Action != ports.Ack {
			t.Fatalf("settled %v, want ACK for the original and its duplicates", s.disp.Action)
		}
	}
	if handled.Load() != 1 || store.Len() != 1 {
		t.Fatalf("handled %d times, store has %d; want 1 and 1", handled.Load(), store.Len())
	}
}

func TestDedupeReleasesFailedKeysAndHoldsConcurrentDuplicates(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	var calls atomic.Int32
	seen := make(chan struct{}, 4)
	a := msg("a", "")
	// The dedupe stage handles items one by one: once it asks for the key
	// of marker, pushed after the duplicate, the duplicate is held.
	marker := msg("marker", "")
	markerSeen := make(chan struct{})
	key := func(it flow.Item[*ports.Delivery]) string {
		if it.Msg == marker {
			close(markerSeen)
			return "" // passes on unchanged
		}
		return it.Msg.ID
	}
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(tap(operators.Dedupe(p.Source(), operators.DedupeOptions[*ports.Delivery]{Key: key}), seen),
			func(_ context.Context, d *ports.Delivery) error {
				if d == marker {
					return nil
				}
				entered <- struct{}{}
				<-release
				if calls.Add(1) == 1 {
					return errTransient
				}
				return nil
			}, flow.Workers(2))
	})
	r.f.push(a, dup(a), marker) // the duplicate arrives while the first is in progress
	recv(t, entered, "the first handling")
	recv(t, markerSeen, "the dedupe stage to pass the duplicate")
	close(release)
	settled := r.f.waitSettled(t, 3)
	for _, x := range settled {
		want := ports.Requeue
		if x.id == marker.ID {
			want = ports.Ack
		}
		if x.disp.Action != want {
			t.Fatalf("%s settled %v, want %v (the held duplicate takes the first one's outcome)", x.id, x.disp.Action, want)
		}
	}
	r.f.push(dup(dup(a))) // the redelivery: the failed key was released, so it is handled
	if s := r.f.waitSettled(t, 4); s[3].disp.Action != ports.Ack || calls.Load() != 2 {
		t.Fatalf("redelivery settled %v after %d calls, want ACK after 2", s[3].disp.Action, calls.Load())
	}
}

type busyStore struct{ operators.MemoryStore }

func (*busyStore) Claim(context.Context, string) (operators.Claim, error) {
	return operators.ClaimBusy, nil
}

type brokenStore struct{ operators.MemoryStore }

func (*brokenStore) Claim(context.Context, string) (operators.Claim, error) {
	return 0, errors.New("store down")
}

func TestDedupeBusyAndStoreErrorsRequeue(t *testing.T) {
	for name, st := range map[string]operators.DedupeStore{"busy": &busyStore{}, "broken": &brokenStore{}} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, spec, func(p *flow.Pipeline) {
				flow.Sink(operators.Dedupe(p.Source(), operators.DedupeOptions[*ports.Delivery]{Store: st}),
					func(context.Context, *ports.Delivery) error { t.Error("handled"); return nil })
			})
			r.f.push(msg("a", ""))
			if d := r.f.waitSettled(t, 1)[0].disp; d.Action != ports.Requeue {
				t.Fatalf("settled %v, want REQUEUE", d.Action)
			}
		})
	}
}

func TestDedupeCancellationReleasesAndSettlesNothing(t *testing.T) {
	entered := make(chan struct{})
	store := operators.NewMemoryStore(operators.MemoryStoreOptions{MaxEntries: 10})
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Dedupe(p.Source(), operators.DedupeOptions[*ports.Delivery]{Store: store}),
			func(ctx context.Context, _ *ports.Delivery) error { close(entered); <-ctx.Done(); return ctx.Err() })
	})
	a := msg("a", "")
	r.f.push(a)
	recv(t, entered, "the handler")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v after cancellation", s)
	}
	if c, _ := store.Claim(context.Background(), a.ID); c != operators.ClaimFresh {
		t.Fatalf("claim after a cancelled attempt = %v, want ClaimFresh (released)", c)
	}
}

type panickyStore struct {
	operators.MemoryStore
	calls atomic.Int32
}

func (s *panickyStore) Claim(ctx context.Context, key string) (operators.Claim, error) {
	if s.calls.Add(1) == 1 {
		panic("store bug")
	}
	return operators.ClaimFresh, nil
}

func TestDedupeStorePanicFailsItemAndFreesKey(t *testing.T) {
	st := &panickyStore{}
	var handled atomic.Int32
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Dedupe(p.Source(), operators.DedupeOptions[*ports.Delivery]{Store: st}),
			func(context.Context, *ports.Delivery) error { handled.Add(1); return nil })
	})
	a := msg("a", "")
	r.f.push(a)
	if d := r.f.waitSettled(t, 1)[0].disp; d.Action != ports.Requeue {
		t.Fatalf("settled %v, want REQUEUE after the store panicked", d.Action)
	}
	r.f.push(dup(a)) // the key must not stay registered: the redelivery is handled
	if d := r.f.waitSettled(t, 2)[1].disp; d.Action != ports.Ack || handled.Load() != 1 {
		t.Fatalf("redelivery settled %v, handled %d; want ACK, 1", d.Action, handled.Load())
	}
}
