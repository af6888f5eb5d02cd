package operators_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func TestTimeoutFailsSlowItemsEvenIfHandlerIgnoresContext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Timeout(p.Source(), 20*time.Millisecond), func(ctx context.Context, d *ports.Delivery) error {
			if string(d.Payload) == "stuck" {
				<-release // ignores ctx
			}
			if string(d.Payload) == "honours" {
				<-ctx.Done()
				if _, ok := context.Cause(ctx).(*operators.TimeoutError); !ok {
					t.Errorf("cause %v, want a TimeoutError", context.Cause(ctx))
				}
				return ctx.Err()
			}
			return nil
		}, flow.Workers(3))
	})
	stuck, honours, fast := msg("stuck", ""), msg("honours", ""), msg("fast", "")
	r.f.push(stuck, honours, fast)
	r.f.waitSettled(t, 3)
	got := r.f.byID()
	var te *operators.TimeoutError
	for _, d := range []*ports.Delivery{stuck, honours} {
		if s := got[d.ID][0]; s.Action != ports.Requeue || !errors.As(s.Reason, &te) {
			t.Fatalf("%s settled %+v, want REQUEUE with a TimeoutError", d.Payload, s)
		}
	}
	if s := got[fast.ID][0]; s.Action != ports.Ack {
		t.Fatalf("fast item settled %v, want ACK", s.Action)
	}
}

func TestTimeoutStopSettlesNothing(t *testing.T) {
	entered := make(chan struct{})
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Timeout(p.Source(), time.Hour), func(ctx context.Context, _ *ports.Delivery) error {
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		})
	})
	r.f.push(msg("a", ""))
	recv(t, entered, "the handler")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v: a stop is not a timeout", s)
	}
}

func TestTimeoutHandlerPanicFailsWithPanicError(t *testing.T) {
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Timeout(p.Source(), time.Minute), func(context.Context, *ports.Delivery) error { panic("boom") })
	})
	r.f.push(msg("a", ""))
	var pe *ports.PanicError
	if d := r.f.waitSettled(t, 1)[0].disp; d.Action != ports.Requeue || !errors.As(d.Reason, &pe) {
		t.Fatalf("settled %+v, want REQUEUE with a PanicError", d)
	}
}
