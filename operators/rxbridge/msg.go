// Package rxbridge connects a flow pipeline to rxgo (github.com/reactivex/rxgo/v2)
// Observables without losing settlement: each item enters the Observable
// as a *Msg carrying its completion, and leaves it back into the pipeline,
// where the usual stages complete it. Each delivery is still settled
// exactly once, and only by its completion.
//
//	out := rxbridge.Through[Order, Invoice](orders, func(o rxgo.Observable) rxgo.Observable {
//		return o.Filter(rxbridge.Keep(isBillable)).Map(rxbridge.Map(toInvoice))
//	})
//	flow.Sink(out, storeInvoice)
//
// # Rules for the chain
//
// rxgo operators see *Msg values. The helpers (Map, Keep, Joined) keep
// settlement exact: Keep completes what it drops (ACK, as flow.Filter
// does), Map completes an item whose function fails and lets it travel on
// as a completed *Msg that later helpers and the bridge skip, and Joined
// turns an rxgo buffer of *Msg into one *Msg whose outcome completes every
// member (a batch). Raw rxgo operators may be used as long as every *Msg
// reaches the end of the chain or is completed: an item dropped by a raw
// operator holds its in-flight slot until the chain ends, and is then
// cancelled (not settled, so the broker redelivers it) and reported.
//
// An error item that reaches the end of the chain, or a chain that
// completes before its input, is fatal: the pipeline stops and what is
// unsettled is redelivered. Panics in helper functions fail the item with
// a *ports.PanicError.
//
// This package imports rxgo; the rest of sluice does not.
package rxbridge

import (
	"context"
	"errors"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Msg is a value travelling through an rxgo Observable with the
// completion that settles what it came from.
type Msg[T any] struct {
	// Ctx is the item's context (cancelled when the pipeline stops).
	Ctx context.Context
	// Value is the typed value.
	Value T
	// Delivery is the delivery behind the value; nil for a joined Msg.
	Delivery *ports.Delivery

	c       *flow.Completion
	members []*flow.Completion // the inputs behind a joined Msg; nil: c itself
}

// Completion returns the completion that settles the Msg's deliveries.
func (m *Msg[T]) Completion() *flow.Completion { return m.c }

// Done reports whether the Msg was completed already (dropped, failed):
// a completed Msg may be dropped by any operator.
func (m *Msg[T]) Done() bool { return m.c.Outcome().Kind != flow.Pending }

// Succeed completes the Msg successfully (ACK).
func (m *Msg[T]) Succeed() error { return m.c.Succeed() }

// Fail completes the Msg from a handler's result: nil succeeds, a
// cancellation of its context settles nothing, poison dead-letters, any
// other error requeues.
func (m *Msg[T]) Fail(err error) error {
	if err != nil && m.Ctx != nil {
		if cerr := m.Ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return m.c.Cancel(err)
		}
	}
	return m.c.Fail(err)
}

// With returns a Msg carrying v with m's context, delivery and completion:
// the way to change a value's type inside the chain.
func With[In, Out any](m *Msg[In], v Out) *Msg[Out] {
	return &Msg[Out]{Ctx: m.Ctx, Value: v, Delivery: m.Delivery, c: m.c, members: m.members}
}

// inputs returns the input completions behind m.
func (m *Msg[T]) inputs() []*flow.Completion {
	if m.members != nil {
		return m.members
	}
	return []*flow.Completion{m.c}
}

func (m *Msg[T]) inputList() (*flow.Completion, []*flow.Completion) { return m.c, m.members }
