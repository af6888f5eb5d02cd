package flow

import (
	"context"
	"errors"

	"github.com/sluicemq/sluice/ports"
)

// Item is one value travelling through a pipeline together with the
// completion future that settles what it came from.
//
// A stage that receives an Item owns it: it must either pass it on (the
// same Completion with a new Value), derive new items from it (Split), or
// complete it. Dropping an Item without completing it leaves its delivery
// unsettled until the pipeline stops.
type Item[T any] struct {
	// Ctx is the item's context: cancelled when the pipeline stops, and
	// carrying the delivery's request id and the delivery itself (see
	// RequestID and DeliveryFrom).
	Ctx context.Context
	// Value is the typed value.
	Value T
	// Msg is the delivery the item came from; nil for a batch or a joined
	// item, which have many.
	Msg *ports.Delivery
	// Completion settles the delivery (or deliveries) behind the item.
	Completion *Completion
}

// Succeed completes the item successfully.
func (it Item[T]) Succeed() error { return it.Completion.Succeed() }

// Fail completes the item with err, classified by Settle: nil succeeds;
// a cancellation of the item's own context cancels (no settlement);
// poison poisons; anything else fails.
func (it Item[T]) Fail(err error) error { return it.Settle(err) }

// Settle completes the item from a handler's result (see Fail).
func (it Item[T]) Settle(err error) error {
	if err != nil && it.Ctx != nil {
		if cerr := it.Ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return it.Completion.Cancel(err)
		}
	}
	return it.Completion.Fail(err)
}

// With returns an item carrying v with it's context, message and completion.
func With[T, U any](it Item[T], v U) Item[U] {
	return Item[U]{Ctx: it.Ctx, Value: v, Msg: it.Msg, Completion: it.Completion}
}
