package kit

import (
	"context"
	"sync"
	"time"
)

// Coalescer queues items (acknowledgements, deletes) and hands them to its
// flush function in batches: when Max items are queued, when the oldest
// queued item has waited Linger, or on Flush. Flushes run one at a time,
// in the order the items were added, so a flush function that writes
// cumulative acknowledgements (an AMQP multiple-ack) sees them in order.
//
// A Coalescer has the shape of ports.Flusher: an adapter whose Settle
// queues into one returns nil from Settle (a deferred acceptance) and
// calls Flush from its own Flush. It is safe for concurrent use. The zero
// value is not usable; call NewCoalescer.
type Coalescer[T any] struct {
	max    int
	linger time.Duration
	fn     func(ctx context.Context, items []T) error
	onErr  func(error)

	flushMu sync.Mutex // serialises fn

	mu     sync.Mutex
	items  []T
	spare  []T
	timer  *time.Timer
	armed  bool
	closed bool
}

// CoalescerOptions configure a Coalescer.
type CoalescerOptions struct {
	// Max is the count that triggers a flush (< 1: 1, no coalescing by
	// count).
	Max int
	// Linger is the longest an item waits for more before it is flushed
	// (<= 0: flushed only by Max, Flush and Close).
	Linger time.Duration
	// OnError receives the error of a flush the Coalescer started on its
	// own (by Linger); flushes by Add, Flush and Close return theirs.
	// Default: dropped (report it through Errors).
	OnError func(error)
}

// NewCoalescer returns a Coalescer calling fn with each batch. fn must not
// keep items after it returns. ctx of a flush started by Linger is
// context.Background.
func NewCoalescer[T any](opts CoalescerOptions, fn func(ctx context.Context, items []T) error) *Coalescer[T] {
	c := &Coalescer[T]{max: max(opts.Max, 1), linger: opts.Linger, fn: fn, onErr: opts.OnError}
	if c.onErr == nil {
		c.onErr = func(error) {}
	}
	return c
}

// Add queues items. When that makes Max or more queued, Add flushes on the
// calling goroutine and returns the flush's error; otherwise it arms the
// Linger timer and returns nil. After Close it returns ErrClosed and
// queues nothing.
func (c *Coalescer[T]) Add(ctx context.Context, items ...T) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errCoalescerClosed
	}
	c.items = append(c.items, items...)
	full := len(c.items) >= c.max
	if !full && !c.armed && c.linger > 0 && len(c.items) > 0 {
		c.armed = true
		if c.timer == nil {
			c.timer = time.AfterFunc(c.linger, c.lingered)
		} else {
			c.timer.Reset(c.linger)
		}
	}
	c.mu.Unlock()
	if full {
		return c.Flush(ctx)
	}
	return nil
}

// Len returns the number of items queued and not yet handed to a flush.
func (c *Coalescer[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

func (c *Coalescer[T]) lingered() {
	c.mu.Lock()
	c.armed = false
	c.mu.Unlock()
	if err := c.Flush(context.Background()); err != nil {
		c.onErr(err)
	}
}

// Flush hands everything queued so far to the flush function and returns
// its error. It waits for a flush in progress first, so when Flush returns
// every item added before the call has been flushed (by this call or an
// earlier one). Items whose flush failed are not queued again: the
// flush function owns its failures.
func (c *Coalescer[T]) Flush(ctx context.Context) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	c.mu.Lock()
	batch := c.items
	c.items, c.spare = c.spare[:0], nil
	if c.armed && c.timer != nil {
		c.timer.Stop()
		c.armed = false
	}
	c.mu.Unlock()
	if len(batch) == 0 {
		c.recycle(batch)
		return nil
	}
	err := c.fn(ctx, batch)
	c.recycle(batch)
	return err
}

func (c *Coalescer[T]) recycle(b []T) {
	clear(b)
	c.mu.Lock()
	if c.spare == nil && cap(b) <= 4*c.max+64 {
		c.spare = b[:0]
	}
	c.mu.Unlock()
}

// Close flushes what is queued, stops the Linger timer and makes later
// Adds fail. It returns the final flush's error; later calls return nil.
func (c *Coalescer[T]) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	return c.Flush(ctx)
}
