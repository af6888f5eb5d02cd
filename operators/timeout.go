package operators

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
)

// TimeoutError is the failure of an item that did not complete in time.
// It is retryable: the delivery is requeued.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string { return fmt.Sprintf("not completed within %v", e.After) }

// Timeout bounds how long everything downstream may take with each item:
// the item's context gets a deadline d from now (its cause a
// *TimeoutError, see context.Cause), and if the item has not completed
// when it passes, it is failed with the *TimeoutError — requeued, or
// dead-lettered past the retry bound — even if the handler ignores its
// context.
//
// Settlement: each item completes exactly once: with the downstream
// outcome if that came before the deadline, else with the TimeoutError
// (poison reported late still dead-letters). A handler that returns its
// context's deadline error is a timeout (a failure), not a cancellation.
// Only the pipeline's own cancellation (stop) settles nothing. A handler still running after its timeout keeps running: its
// later outcome is refused, and since the delivery is requeued another
// attempt may overlap with it (at-least-once). Order is kept.
//
// If d <= 0, the pipeline's Start fails with an error wrapping
// ports.ErrInvalid.
func Timeout[T any](in flow.Stream[T], d time.Duration) flow.Stream[T] {
	if d <= 0 {
		return flow.Invalid[T, T](in, invalid("Timeout", "d", "must be positive"))
	}
	return flow.Via(in, func(it flow.Item[T], emit flow.Emit[T]) {
		parentCtx, parent := it.Ctx, it.Completion
		cause := &TimeoutError{After: d}
		ctx, cancel := context.WithTimeoutCause(parentCtx, d, cause)
		var mu sync.Mutex // guards stop, which the AfterFunc may race to use
		var stop func() bool
		// Not Derive: the late outcome of a handler that ignored its
		// deadline is expected to lose, and is not a conflict to report.
		c := flow.NewCompletion(func(o flow.Outcome) {
			late := context.Cause(ctx) == cause && parentCtx.Err() == nil
			mu.Lock()
			s := stop
			mu.Unlock()
			if s != nil {
				s()
			}
			cancel()
			if late && o.Kind != flow.Poisoned {
				o = flow.Outcome{Kind: flow.Failed, Err: cause} // completed after the deadline
			}
			_ = parent.Complete(o)
		})
		mu.Lock()
		stop = context.AfterFunc(ctx, func() {
			if parentCtx.Err() == nil && context.Cause(ctx) == cause {
				_ = c.Fail(cause)
			}
		})
		mu.Unlock()
		it.Ctx, it.Completion = ctx, c
		emit(it)
	})
}
