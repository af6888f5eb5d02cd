package kit

import (
	"context"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// Inbox is the buffer between an adapter's receive loop and
// Subscription.Receive: the loop pushes what the broker delivered, Receive
// takes up to max at a time and blocks until there is at least one.
//
// A bounded Inbox (NewInbox with limit > 0) blocks Push while it holds
// limit items, which is how an adapter applies backpressure to a broker
// that pushes (stop reading the connection) when its prefetch cannot bound
// it. PushFront never blocks: it returns items taken out of the inbox.
//
// An Inbox is safe for concurrent use. The zero value is not usable; call
// NewInbox.
type Inbox[T any] struct {
	limit int

	mu     sync.Mutex
	buf    []T // buf[head:] are queued
	head   int
	closed bool
	ready  chan struct{} // closed and replaced when an item arrives or on Close
	room   chan struct{} // closed and replaced when items leave or on Close
	// readers and writers say whether anyone waits on ready or room, so an
	// uncontended Push or Receive allocates no channel.
	readers, writers bool
}

// NewInbox returns an empty Inbox holding at most limit items (limit <= 0:
// unbounded).
func NewInbox[T any](limit int) *Inbox[T] {
	return &Inbox[T]{limit: limit, ready: make(chan struct{}), room: make(chan struct{})}
}

// Push appends items, blocking while a bounded inbox is full. It returns
// ports.ErrClosed after Close and ctx.Err() when ctx is done first; items
// not yet appended then are not queued (the caller still owns them).
// Items are appended in order; with a bound, a long push may be split
// around concurrent Receives.
func (in *Inbox[T]) Push(ctx context.Context, items ...T) error {
	for len(items) > 0 {
		in.mu.Lock()
		if in.closed {
			in.mu.Unlock()
			return ports.ErrClosed
		}
		n := len(items)
		if in.limit > 0 {
			n = min(n, in.limit-in.lenLocked())
		}
		if n <= 0 {
			room := in.room
			in.writers = true
			in.mu.Unlock()
			select {
			case <-room:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		in.buf = append(in.buf, items[:n]...)
		items = items[n:]
		in.signalLocked(&in.ready, &in.readers)
		in.mu.Unlock()
	}
	return nil
}

// PushFront puts items back at the head, in order, ahead of everything
// queued, without blocking and regardless of the bound (they were taken
// from this inbox). After Close it returns ports.ErrClosed and queues
// nothing.
func (in *Inbox[T]) PushFront(items ...T) error {
	if len(items) == 0 {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return ports.ErrClosed
	}
	if in.head >= len(items) {
		in.head -= len(items)
		copy(in.buf[in.head:], items)
	} else {
		rest := in.buf[in.head:]
		nb := make([]T, 0, len(items)+len(rest))
		nb = append(nb, items...)
		in.buf = append(nb, rest...)
		in.head = 0
	}
	in.signalLocked(&in.ready, &in.readers)
	return nil
}

// Receive blocks until at least one item is queued and returns up to max
// of them (max < 1 is treated as 1), oldest first. It returns ctx.Err()
// when ctx is done first and ports.ErrClosed once the inbox is closed.
func (in *Inbox[T]) Receive(ctx context.Context, max int) ([]T, error) {
	max = maxInt(max, 1)
	for {
		in.mu.Lock()
		if in.closed {
			in.mu.Unlock()
			return nil, ports.ErrClosed
		}
		if n := min(in.lenLocked(), max); n > 0 {
			out := make([]T, n)
			copy(out, in.buf[in.head:in.head+n])
			var zero T
			for i := in.head; i < in.head+n; i++ {
				in.buf[i] = zero
			}
			in.head += n
			in.compactLocked()
			in.signalLocked(&in.room, &in.writers)
			in.mu.Unlock()
			return out, nil
		}
		ready := in.ready
		in.readers = true
		in.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Len returns the number of queued items.
func (in *Inbox[T]) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lenLocked()
}

// Close closes the inbox and returns what was still queued, oldest first,
// so the adapter can hand it back to the broker. Blocked Push and Receive
// calls return ports.ErrClosed. Later calls return nil.
func (in *Inbox[T]) Close() []T {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil
	}
	in.closed = true
	rest := in.buf[in.head:]
	in.buf, in.head = nil, 0
	close(in.ready)
	close(in.room)
	return rest
}

func (in *Inbox[T]) lenLocked() int { return len(in.buf) - in.head }

// compactLocked releases the consumed prefix once it is the larger part.
func (in *Inbox[T]) compactLocked() {
	if in.head == len(in.buf) {
		in.buf, in.head = in.buf[:0], 0
		return
	}
	if in.head > 1024 && in.head > len(in.buf)/2 {
		n := copy(in.buf, in.buf[in.head:])
		var zero T
		for i := n; i < len(in.buf); i++ {
			in.buf[i] = zero
		}
		in.buf, in.head = in.buf[:n], 0
	}
}

func (in *Inbox[T]) signalLocked(ch *chan struct{}, waiting *bool) {
	if !*waiting {
		return
	}
	*waiting = false
	close(*ch)
	*ch = make(chan struct{})
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
