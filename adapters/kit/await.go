package kit

import "context"

// Await runs f in its own goroutine, for broker clients that take no
// context, and returns its result, or ctx.Err() when ctx ends first. Then
// late, when not nil, receives f's result when it comes (to close what f
// opened).
func Await[T any](ctx context.Context, f func() (T, error), late func(T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if late != nil {
			go func() { r := <-ch; late(r.v, r.err) }()
		}
		var zero T
		return zero, ctx.Err()
	}
}
