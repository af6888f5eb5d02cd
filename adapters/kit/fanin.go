package kit

import (
	"context"
	"reflect"
	"slices"
	"sync"
)

// Fanin receives from a changing set of channels on the receiving
// goroutine itself, for a client that hands out one channel per partition
// or queue (sarama's partition claims): no goroutine stands between the
// client and the driver's ReceiveBatch. Each channel comes with a tag
// (the driver's partition) that is returned with its values; a closed
// channel leaves the set once drained. Add and Remove are safe for
// concurrent use and wake a Wait; Poll and Wait are called from one
// goroutine. Create it with NewFanin.
type Fanin[K comparable, T any] struct {
	mu      sync.Mutex
	sources []fanSource[K, T] // replaced, never changed in place
	changed chan struct{}

	held  []Tagged[K, T] // received by Wait, returned by the next Poll
	cases []reflect.SelectCase
}

// Tagged is a value received from the channel added with Tag.
type Tagged[K comparable, T any] struct {
	Tag   K
	Value T
}

type fanSource[K comparable, T any] struct {
	tag K
	ch  <-chan T
}

// NewFanin returns an empty Fanin.
func NewFanin[K comparable, T any]() *Fanin[K, T] {
	return &Fanin[K, T]{changed: make(chan struct{}, 1)}
}

// Add receives from ch, tagged tag, from now on.
func (f *Fanin[K, T]) Add(tag K, ch <-chan T) {
	f.mu.Lock()
	f.sources = append(slices.Clip(f.sources), fanSource[K, T]{tag, ch})
	f.mu.Unlock()
	Signal(f.changed)
}

// Remove stops receiving from the channels tagged tag.
func (f *Fanin[K, T]) Remove(tag K) {
	f.mu.Lock()
	f.sources = slices.DeleteFunc(slices.Clone(f.sources), func(s fanSource[K, T]) bool { return s.tag == tag })
	f.mu.Unlock()
	Signal(f.changed)
}

func (f *Fanin[K, T]) list() []fanSource[K, T] {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sources
}

func (f *Fanin[K, T]) closed(ch <-chan T) {
	f.mu.Lock()
	f.sources = slices.DeleteFunc(slices.Clone(f.sources), func(s fanSource[K, T]) bool { return s.ch == ch })
	f.mu.Unlock()
}

// Poll appends to out the value a Wait received, then what the channels
// hold now, without waiting, up to max values in all.
func (f *Fanin[K, T]) Poll(out []Tagged[K, T], max int) []Tagged[K, T] {
	out = append(out, f.held...)
	clear(f.held)
	f.held = f.held[:0]
	for _, s := range f.list() {
	drain:
		for len(out) < max {
			select {
			case v, ok := <-s.ch:
				if !ok {
					f.closed(s.ch)
					break drain
				}
				out = append(out, Tagged[K, T]{s.tag, v})
			default:
				break drain
			}
		}
	}
	return out
}

// Wait blocks until a channel has a value (when receive is true; the next
// Poll returns it), the set changes, wake is signalled, failed delivers
// an error (returned) or ctx is done (ctx.Err()).
func (f *Fanin[K, T]) Wait(ctx context.Context, receive bool, wake <-chan struct{}, failed <-chan error) error {
	sources := f.list()
	cases := append(f.cases[:0], recv(ctx.Done()), recv(failed), recv(wake), recv(f.changed))
	if receive {
		for _, s := range sources {
			cases = append(cases, recv(s.ch))
		}
	}
	f.cases = cases
	i, v, ok := reflect.Select(cases)
	clear(cases)
	switch {
	case i == 0:
		return ctx.Err()
	case i == 1:
		return v.Interface().(error)
	case i < 4:
	case !ok:
		f.closed(sources[i-4].ch)
	default:
		f.held = append(f.held, Tagged[K, T]{sources[i-4].tag, v.Interface().(T)})
	}
	return nil
}

func recv[T any](ch <-chan T) reflect.SelectCase {
	return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
}
