package operators

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/flow"
)

// ThrottleOptions configure Throttle.
type ThrottleOptions struct {
	// Rate is the sustained number of items per second. Required.
	Rate float64
	// Burst is how many items may pass at once after a quiet period.
	// Default 1.
	Burst int
}

// Throttle passes items on at no more than Rate per second on average,
// with bursts of up to Burst (a token bucket). Items wait in arrival
// order; waiting items hold their in-flight slots, so upstream slows down
// too.
//
// Settlement: Throttle completes nothing on the way: every item is passed
// on with its completion, in order. When the pipeline cancels, the waiting
// item and every later one are cancelled (not settled).
//
// If Rate <= 0 or Burst < 0, the pipeline's Start fails with an error wrapping
// ports.ErrInvalid.
func Throttle[T any](in flow.Stream[T], o ThrottleOptions) flow.Stream[T] {
	if o.Rate <= 0 || o.Burst < 0 {
		return flow.Invalid[T, T](in, invalid("Throttle", "ThrottleOptions", "Rate must be positive and Burst not negative"))
	}
	if o.Burst == 0 {
		o.Burst = 1
	}
	return flow.Operate(in, func(ctx context.Context, src <-chan flow.Item[T], out chan<- flow.Item[T]) error {
		tokens, last := float64(o.Burst), time.Now()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for it := range src {
			if cancelled(it) {
				continue
			}
			now := time.Now()
			tokens = min(float64(o.Burst), tokens+now.Sub(last).Seconds()*o.Rate)
			last = now
			if tokens < 1 {
				wait := time.Duration((1 - tokens) / o.Rate * float64(time.Second))
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					_ = it.Completion.Cancel(ctx.Err())
					cancelRest(src, ctx.Err())
					return nil
				}
				now = time.Now()
				tokens = min(float64(o.Burst), tokens+now.Sub(last).Seconds()*o.Rate)
				last = now
			}
			tokens--
			out <- it
		}
		return nil
	})
}
