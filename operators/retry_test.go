package operators_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func fastRetry(n int) operators.RetryOptions {
	return operators.RetryOptions{Attempts: n, Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}
}

func TestRetrySucceedsWithinBound(t *testing.T) {
	var calls atomic.Int32
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), operators.Retry(func(context.Context, *ports.Delivery) error {
			if calls.Add(1) < 3 {
				return errTransient
			}
			return nil
		}, fastRetry(3)))
	})
	r.f.push(msg("a", ""))
	if s := r.f.waitSettled(t, 1); s[0].disp.Action != ports.Ack || calls.Load() != 3 {
		t.Fatalf("settled %v after %d calls, want ACK after 3", s[0].disp.Action, calls.Load())
	}
}

func TestRetryExhaustedHandsOnLastErrorWithAttempts(t *testing.T) {
	var calls atomic.Int32
	sp := spec
	sp.Retry.MaxAttempts = 2
	r := newRig(t, sp, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), operators.Retry(func(context.Context, *ports.Delivery) error {
			calls.Add(1)
			return errTransient
		}, fastRetry(4)))
	})
	first, last := msg("a", ""), msg("b", "")
	last.RedeliveryCount = 1 // the second and last delivery under MaxAttempts=2
	r.f.push(first, last)
	r.f.waitSettled(t, 2)
	got := r.f.byID()
	var ae *operators.AttemptsError
	if d := got[first.ID][0]; d.Action != ports.Requeue || !errors.As(d.Reason, &ae) || ae.Attempts != 4 || !errors.Is(d.Reason, errTransient) {
		t.Fatalf("first delivery settled %+v, want REQUEUE with an AttemptsError of 4 wrapping the error", d)
	}
	d := got[last.ID][0]
	if d.Action != ports.DeadLetter || d.Attempts != 2 || !strings.Contains(d.ReasonText(), "4 local attempts") || !errors.Is(d.Reason, errTransient) {
		t.Fatalf("last delivery settled %+v, want DEAD_LETTER with attempts 2 and the local attempts in the reason", d)
	}
	if calls.Load() != 8 {
		t.Fatalf("%d calls, want 4 per delivery", calls.Load())
	}
}

func TestRetryNeverRetriesPoisonOrPanics(t *testing.T) {
	for name, fail := range map[string]func() error{
		"poison": func() error { return ports.Poisonf("bad") },
		"panic":  func() error { panic("boom") },
	} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			r := newRig(t, spec, func(p *flow.Pipeline) {
				flow.Sink(p.Source(), operators.Retry(func(context.Context, *ports.Delivery) error { calls.Add(1); return fail() }, fastRetry(5)))
			})
			r.f.push(msg("a", ""))
			r.f.waitSettled(t, 1)
			if calls.Load() != 1 {
				t.Fatalf("%d calls, want 1", calls.Load())
			}
		})
	}
}

func TestRetryCancelledDuringBackoffSettlesNothing(t *testing.T) {
	called := make(chan struct{}, 1)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), operators.Retry(func(context.Context, *ports.Delivery) error {
			called <- struct{}{}
			return errTransient
		}, operators.RetryOptions{Attempts: 3, Backoff: time.Hour}))
	})
	r.f.push(msg("a", ""))
	recv(t, called, "the first call")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v; a cancelled retry must settle nothing", s)
	}
}

func TestRetryMapReturnsValue(t *testing.T) {
	n := 0
	f := operators.RetryMap(func(context.Context, int) (string, error) {
		n++
		if n == 1 {
			return "", errTransient
		}
		return "ok", nil
	}, fastRetry(2))
	if v, err := f(context.Background(), 1); v != "ok" || err != nil {
		t.Fatalf("RetryMap = %q, %v", v, err)
	}
}

func TestRedeliveryLimitDeadLettersWithoutHandling(t *testing.T) {
	var handled atomic.Int32
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.RedeliveryLimit(p.Source(), 3), func(ctx context.Context, _ *ports.Delivery) error {
			if operators.Attempt(ctx) != 3 {
				t.Errorf("Attempt = %d, want 3", operators.Attempt(ctx))
			}
			handled.Add(1)
			return nil
		})
	})
	over, under := msg("over", ""), msg("under", "")
	over.RedeliveryCount, under.RedeliveryCount = 5, 2
	r.f.push(over, under)
	r.f.waitSettled(t, 2)
	got := r.f.byID()
	var le *operators.RedeliveryLimitError
	if d := got[over.ID][0]; d.Action != ports.DeadLetter || !errors.As(d.Reason, &le) || d.Attempts != 6 {
		t.Fatalf("over-limit delivery settled %+v, want DEAD_LETTER, RedeliveryLimitError, attempts 6", d)
	}
	if d := got[under.ID][0]; d.Action != ports.Ack || handled.Load() != 1 {
		t.Fatalf("under-limit delivery settled %v, handled %d; want ACK, 1", d.Action, handled.Load())
	}
}
