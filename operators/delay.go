package operators

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// Delay holds each item for d before passing it on. See DelayUntil.
//
// If d is negative, the pipeline's Start fails with an error wrapping
// ports.ErrInvalid.
func Delay[T any](in flow.Stream[T], d time.Duration) flow.Stream[T] {
	if d < 0 {
		return flow.Invalid[T, T](in, invalid("Delay", "d", "must not be negative"))
	}
	return DelayUntil(in, func(flow.Item[T]) time.Time { return time.Now().Add(d) })
}

// DelayUntil holds each item until the time until returns for it (a
// "not before" header, a per-tenant pause) and then passes it on; a past
// time passes it on at once.
//
// Order: items leave in deadline order, ties in arrival order. All held
// items share one timer heap and one timer in the stage's goroutine — no
// goroutine or runtime timer per item — so thousands of held items are
// cheap; each one still holds its delivery's in-flight slot, so the
// subscription's in-flight limit bounds how many can wait.
//
// Settlement: Delay completes nothing on the way: every item is passed on
// with its completion. When the input closes (the pipeline is stopping)
// held items are still passed on at their time, within the drain; when the
// pipeline cancels, held items are cancelled (not settled: the broker
// redelivers them).
func DelayUntil[T any](in flow.Stream[T], until func(flow.Item[T]) time.Time) flow.Stream[T] {
	return flow.Operate(in, func(ctx context.Context, src <-chan flow.Item[T], out chan<- flow.Item[T]) error {
		var h schedule.Heap[flow.Item[T]]
		start := time.Now()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		var armed int64 = -1
		for {
			now := int64(time.Since(start))
			for e := h.Peek(); e != nil && e.When <= now; e = h.Peek() {
				h.Pop()
				if !cancelled(e.Value) {
					out <- e.Value
				}
			}
			if src == nil && h.Len() == 0 {
				return nil
			}
			var fire <-chan time.Time
			if e := h.Peek(); e != nil {
				if e.When != armed {
					timer.Reset(time.Duration(e.When - now))
					armed = e.When
				}
				fire = timer.C
			}
			select {
			case it, ok := <-src:
				if !ok {
					src = nil
					continue
				}
				if cancelled(it) {
					continue
				}
				at, err := callUntil(until, it)
				if err != nil {
					_ = it.Completion.Fail(err)
					continue
				}
				h.Push(int64(at.Sub(start)), it)
			case <-fire:
				armed = -1
			case <-ctx.Done():
				for _, e := range h.Drain() {
					_ = e.Value.Completion.Cancel(ctx.Err())
				}
				if src != nil {
					cancelRest(src, ctx.Err())
				}
				return nil
			}
		}
	})
}

// callUntil asks until for the item's time; a panic fails the item.
func callUntil[T any](until func(flow.Item[T]) time.Time, it flow.Item[T]) (t time.Time, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &ports.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return until(it), nil
}
