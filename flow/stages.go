package flow

import "context"

// Map transforms each value. An error completes the item (poison
// dead-letters, other errors requeue, cancellation settles nothing) and
// nothing is emitted; otherwise the new value travels on with the same
// completion.
func Map[In, Out any](in Stream[In], fn func(ctx context.Context, v In) (Out, error), opts ...StageOption) Stream[Out] {
	in.exposeDelivery()
	return via(in, func(it Item[In], emit Emit[Out]) {
		v, err := fn(it.Ctx, it.Value)
		if err != nil {
			_ = it.Settle(err)
			return
		}
		emit(With(it, v))
	}, opts...)
}

// Filter keeps the values for which keep returns true. A dropped item is
// completed successfully (it was handled: by deciding it needs nothing),
// so its delivery is acked. An error completes the item as in Map.
func Filter[T any](in Stream[T], keep func(ctx context.Context, v T) (bool, error), opts ...StageOption) Stream[T] {
	in.exposeDelivery()
	return via(in, func(it Item[T], emit Emit[T]) {
		ok, err := keep(it.Ctx, it.Value)
		switch {
		case err != nil:
			_ = it.Settle(err)
		case ok:
			emit(it)
		default:
			_ = it.Succeed()
		}
	}, opts...)
}

// FlatMap turns each value into zero or more values. The input completes
// when every output has completed, with the most severe outcome among
// them (poison, then cancelled, then failed); zero outputs complete it
// successfully. An error completes the item as in Map.
func FlatMap[In, Out any](in Stream[In], fn func(ctx context.Context, v In) ([]Out, error), opts ...StageOption) Stream[Out] {
	out := Via(in, func(it Item[In], emit Emit[Out]) {
		vs, err := fn(it.Ctx, it.Value)
		if err != nil {
			_ = it.Settle(err)
			return
		}
		kids := it.Completion.Split(len(vs))
		for i, v := range vs {
			emit(Item[Out]{Ctx: it.Ctx, Value: v, Msg: it.Msg, Completion: kids[i]})
		}
	}, opts...)
	out.fanOut = "FlatMap"
	return out
}
