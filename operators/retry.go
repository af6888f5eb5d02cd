package operators

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// RetryOptions configure local retries. Zero fields take the defaults
// named on each.
type RetryOptions struct {
	// Attempts is the number of calls, the first included, before the
	// last error is handed on. Default 3.
	Attempts int
	// Backoff is the wait before the second call. Default 10ms.
	Backoff time.Duration
	// MaxBackoff caps the growing wait. Default 1s.
	MaxBackoff time.Duration
	// Multiplier grows the wait per call. Default 2.
	Multiplier float64
	// Jitter spreads each wait by ±Jitter (0..1). Default 0.2.
	Jitter float64
	// Retryable decides which errors are worth another call. Default:
	// every error except poison (ports.IsPoison), context errors and
	// panics (*ports.PanicError).
	Retryable func(error) bool
}

func (o RetryOptions) withDefaults() RetryOptions {
	if o.Attempts < 0 || o.Backoff < 0 || o.MaxBackoff < 0 || o.Jitter < 0 || o.Jitter > 1 || o.Multiplier < 0 {
		// Retry wraps a function, not a stream: there is no pipeline to
		// report to, so a programming error in its options panics here.
		panic(invalid("Retry", "RetryOptions", "attempts, backoffs and multiplier must not be negative, jitter must be within 0..1"))
	}
	if o.Attempts == 0 {
		o.Attempts = 3
	}
	if o.Backoff == 0 {
		o.Backoff = 10 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = time.Second
	}
	if o.Retryable == nil {
		o.Retryable = retryable
	}
	return o
}

func retryable(err error) bool {
	var pe *ports.PanicError
	return !ports.IsPoison(err) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &pe)
}

func (o RetryOptions) policy() ports.RetryPolicy {
	return ports.RetryPolicy{Backoff: o.Backoff, MaxBackoff: o.MaxBackoff, Multiplier: o.Multiplier, Jitter: o.Jitter}.WithDefaults()
}

// AttemptsError is the error a retried function hands on after its last
// attempt failed: it names how many calls were made and unwraps to the
// last error, so poison stays poison and the dead-letter reason carries
// both.
type AttemptsError struct {
	Attempts int
	Last     error
}

func (e *AttemptsError) Error() string {
	return fmt.Sprintf("failed after %d local attempts: %v", e.Attempts, e.Last)
}

// Unwrap returns the last error.
func (e *AttemptsError) Unwrap() error { return e.Last }

// Retry returns fn retried in place: a retryable error calls fn again
// after an exponential backoff with jitter, up to Attempts calls, before
// the delivery is given back. The result then flows on as usual — success
// acks, the last error (wrapped in *AttemptsError) requeues or, past the
// subscription's RetryPolicy.MaxAttempts, dead-letters with the attempt
// count and the error as reason; poison is never retried.
//
// Settlement: Retry changes nothing but the result of fn; the item is
// completed once, by the stage that calls it. A cancelled context stops
// the retries and returns ctx.Err() (no settlement). Retries hold the
// worker and the delivery's in-flight slot while they wait.
//
// Retry panics if an option is invalid.
func Retry[T any](fn func(context.Context, T) error, o RetryOptions) func(context.Context, T) error {
	r := RetryMap(func(ctx context.Context, v T) (struct{}, error) { return struct{}{}, fn(ctx, v) }, o)
	return func(ctx context.Context, v T) error {
		_, err := r(ctx, v)
		return err
	}
}

// RetryMap is Retry for a function with a result (a Map stage's).
func RetryMap[In, Out any](fn func(context.Context, In) (Out, error), o RetryOptions) func(context.Context, In) (Out, error) {
	o = o.withDefaults()
	pol := o.policy()
	return func(ctx context.Context, v In) (Out, error) {
		var zero Out
		for attempt := 1; ; attempt++ {
			out, err := callMap(fn, ctx, v)
			if err == nil {
				return out, nil
			}
			if attempt >= o.Attempts || !o.Retryable(err) {
				if attempt > 1 {
					err = &AttemptsError{Attempts: attempt, Last: err}
				}
				return zero, err
			}
			if err := sleep(ctx, pol.Delay(attempt)); err != nil {
				return zero, err
			}
		}
	}
}

func callMap[In, Out any](fn func(context.Context, In) (Out, error), ctx context.Context, v In) (out Out, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &ports.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, v)
}

// sleep waits d or until ctx is done (returning ctx.Err()).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
