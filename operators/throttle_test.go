package operators_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func TestThrottleBoundsRate(t *testing.T) {
	const rate, burst, n = 200.0, 5, 25
	start := time.Now()
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Throttle(p.Source(), operators.ThrottleOptions{Rate: rate, Burst: burst}),
			func(context.Context, *ports.Delivery) error { return nil })
	})
	r.f.push(msgs(n)...)
	r.f.waitSettled(t, n)
	// n items with a burst of 5 need at least (n-burst)/rate.
	if min := time.Duration(float64(n-burst) / rate * float64(time.Second)); time.Since(start) < min*9/10 {
		t.Fatalf("%d items passed in %v; the rate allows no less than %v", n, time.Since(start), min)
	}
}

func TestThrottleCancelsWaitingItems(t *testing.T) {
	seen := make(chan struct{}, 3)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Throttle(tap(p.Source(), seen), operators.ThrottleOptions{Rate: 0.001}),
			func(context.Context, *ports.Delivery) error { return nil })
	})
	r.f.push(msgs(3)...)
	r.f.waitSettled(t, 1) // the burst of one passes
	waitN(t, seen, 3, "items reaching the throttle")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 1 {
		t.Fatalf("settled %d, want only the first (the others were waiting and are cancelled)", len(s))
	}
}
