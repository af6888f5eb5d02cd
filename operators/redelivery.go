package operators

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Attempt returns which delivery of its message the handler's ctx belongs
// to: 1 for the first, RedeliveryCount+1 after requeues (exact where the
// adapter declares Capabilities.ExactRedeliveryCount, a lower bound
// otherwise). It returns 0 for a context without a delivery (a batch).
func Attempt(ctx context.Context) int {
	if d := flow.DeliveryFrom(ctx); d != nil {
		return d.RedeliveryCount + 1
	}
	return 0
}

// RedeliveryLimitError is the dead-letter reason of a delivery that had
// been delivered too often to be handled again.
type RedeliveryLimitError struct {
	Redeliveries int // the delivery's RedeliveryCount
	Limit        int
}

func (e *RedeliveryLimitError) Error() string {
	return fmt.Sprintf("redelivered %d times (limit %d) without being settled: not handled again", e.Redeliveries, e.Limit)
}

// Is makes errors.Is(err, ports.ErrPoison) true.
func (e *RedeliveryLimitError) Is(target error) bool { return target == ports.ErrPoison }

// RedeliveryLimit dead-letters, without handling them, items whose
// delivery was redelivered limit times or more — the guard against a
// message that crashes or stalls every consumer before it can be settled
// (the pipeline's own retry bound only counts attempts that ended in a
// settlement). The reason is a *RedeliveryLimitError, and the dead letter
// carries the attempt count.
//
// Settlement: an item over the limit is poisoned at once (dead-lettered);
// the others pass on unchanged, in order. Items without a delivery pass
// on. With an adapter whose count is only a lower bound the guard trips
// late, never early; a consumer stopped repeatedly while handling the
// same message counts as redeliveries too.
//
// If limit < 1, the pipeline's Start fails with an error wrapping
// ports.ErrInvalid.
func RedeliveryLimit[T any](in flow.Stream[T], limit int) flow.Stream[T] {
	if limit < 1 {
		return flow.Invalid[T, T](in, invalid("RedeliveryLimit", "limit", "must be at least 1"))
	}
	return flow.Via(in, func(it flow.Item[T], emit flow.Emit[T]) {
		if it.Msg != nil && it.Msg.RedeliveryCount >= limit {
			_ = it.Completion.Fail(&RedeliveryLimitError{Redeliveries: it.Msg.RedeliveryCount, Limit: limit})
			return
		}
		emit(it)
	})
}
