package operators

import (
	"context"
	"sync"

	"github.com/sluicemq/sluice/flow"
)

// ConcurrentOptions configure Concurrent.
type ConcurrentOptions struct {
	// Limit is the number of calls of fn in progress at once. Default 4.
	Limit int
	// Ordered emits results in input order (a slow item holds back the
	// ones after it, up to Limit of them). Default false: results leave
	// as they complete.
	Ordered bool
}

// Concurrent maps each value with fn, up to Limit calls at once. It is a
// parallel flow.Map: fn's error completes the item (poison dead-letters,
// other errors requeue, cancellation settles nothing) and nothing is
// emitted for it; a result travels on with the item's completion; a panic
// fails the item with a *ports.PanicError.
//
// Order: unordered by default; with Ordered, results keep input order.
// Settlement is unchanged by the order: each item is completed by the
// stage that finally handles its result.
//
// If Limit is negative, the pipeline's Start fails with an error wrapping
// ports.ErrInvalid.
func Concurrent[In, Out any](in flow.Stream[In], fn func(context.Context, In) (Out, error), o ConcurrentOptions) flow.Stream[Out] {
	if o.Limit < 0 {
		return flow.Invalid[In, Out](in, invalid("Concurrent", "Limit", "must not be negative"))
	}
	if o.Limit == 0 {
		o.Limit = 4
	}
	if !o.Ordered {
		return flow.Map(in, fn, flow.Workers(o.Limit))
	}
	return flow.Operate(in, func(_ context.Context, src <-chan flow.Item[In], out chan<- flow.Item[Out]) error {
		runOrdered(src, out, fn, o.Limit)
		return nil
	})
}

// slot is one item's place in the output order.
type slot[Out any] struct {
	it   flow.Item[Out]
	ok   bool
	done chan struct{}
}

type job[In, Out any] struct {
	it flow.Item[In]
	s  *slot[Out]
}

func runOrdered[In, Out any](src <-chan flow.Item[In], out chan<- flow.Item[Out], fn func(context.Context, In) (Out, error), limit int) {
	order := make(chan *slot[Out], limit) // bounds the items in progress and unemitted
	jobs := make(chan job[In, Out])
	var wg sync.WaitGroup
	wg.Add(limit + 1)
	for range limit {
		go func() {
			defer wg.Done()
			for j := range jobs {
				j.s.it, j.s.ok = apply(j.it, fn)
				close(j.s.done)
			}
		}()
	}
	go func() { // emits in input order
		defer wg.Done()
		for s := range order {
			<-s.done
			if s.ok {
				out <- s.it
			}
		}
	}()
	for it := range src {
		s := &slot[Out]{done: make(chan struct{})}
		order <- s
		jobs <- job[In, Out]{it: it, s: s}
	}
	close(jobs)
	close(order)
	wg.Wait()
}

// apply runs fn on it: the result item, or false when it was completed
// (cancelled, failed, panicked).
func apply[In, Out any](it flow.Item[In], fn func(context.Context, In) (Out, error)) (flow.Item[Out], bool) {
	if cancelled(it) {
		return flow.Item[Out]{}, false
	}
	v, err := callMap(fn, it.Ctx, it.Value)
	if err != nil {
		_ = it.Settle(err)
		return flow.Item[Out]{}, false
	}
	return flow.With(it, v), true
}
