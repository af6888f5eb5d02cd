package main

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Batch is a batch of values with the delivery each came from.
type Batch[T any] struct {
	Values []T
	Msgs   []*ports.Delivery
}

// batches groups items into batches of up to size, closing a partial
// batch window after its first item. A batch item's completion is the
// join of its members' (flow.Join): one outcome settles them all. The
// operators package offers the same as operators.Batch, with byte bounds
// and poison isolation.
func batches[T any](in flow.Stream[T], size int, window time.Duration) flow.Stream[Batch[T]] {
	return flow.Operate(in, func(ctx context.Context, src <-chan flow.Item[T], out chan<- flow.Item[Batch[T]]) error {
		var held []flow.Item[T]
		timer := time.NewTimer(window)
		timer.Stop()
		defer timer.Stop()
		flush := func() {
			timer.Stop()
			if len(held) == 0 {
				return
			}
			b := Batch[T]{Values: make([]T, len(held)), Msgs: make([]*ports.Delivery, len(held))}
			cs := make([]*flow.Completion, len(held))
			for i, it := range held {
				b.Values[i], b.Msgs[i], cs[i] = it.Value, it.Msg, it.Completion
			}
			held = nil
			out <- flow.Item[Batch[T]]{Ctx: ctx, Value: b, Completion: flow.Join(cs...)}
		}
		for {
			select {
			case it, ok := <-src:
				if !ok { // the pipeline is stopping: hand on what we hold
					flush()
					return nil
				}
				held = append(held, it)
				if len(held) == 1 {
					timer.Reset(window)
				}
				if len(held) >= size {
					flush()
				}
			case <-timer.C:
				flush()
			}
		}
	})
}
