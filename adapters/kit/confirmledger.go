package kit

import (
	"context"
	"sync"
)

// ConfirmLedger is the ledger of the publishes on one channel whose
// broker confirms them by sequence number, in publish order, singly or up
// to a number at once (AMQP 0-9-1 publisher confirms: delivery tags 1, 2,
// …). A publish is registered under its number before it is written, so
// that a confirm read at once finds it, and is resolved in the [Confirms]
// of its SendBatch by Confirm or, when the channel is lost, by Fail. One
// goroutine should apply what the broker sends, in the order it arrives;
// ConfirmLedger is safe for concurrent use.
type ConfirmLedger[T any] struct {
	room  chan struct{} // one token per outstanding publish
	write sync.Mutex    // serialises numbering and the write
	next  uint64        // the number of the next publish
	mu    sync.Mutex
	q     []pending[T] // outstanding, ascending numbers, from hd
	hd    int
	err   error // set by Fail
}

type pending[T any] struct {
	seq uint64
	res *Confirms
	i   int
	val T
}

// NewConfirmLedger returns a ledger of at most max outstanding publishes
// whose first publish has the number first.
func NewConfirmLedger[T any](max int, first uint64) *ConfirmLedger[T] {
	return &ConfirmLedger[T]{room: make(chan struct{}, max), next: first}
}

// Publish registers message i of r, described by val, and writes it with
// write, waiting for room while max publishes are outstanding. It returns
// nil once write returned nil: Confirm or Fail resolves the publish then.
// Otherwise the publish was not written and is not registered: it returns
// ctx's error, the error the ledger failed with, or write's error — or nil
// when Fail resolved the publish while write was failing.
func (c *ConfirmLedger[T]) Publish(ctx context.Context, r *Confirms, i int, val T, write func() error) error {
	if err := ctx.Err(); err != nil { // a client may write whatever ctx says
		return err
	}
	select {
	case c.room <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.write.Lock()
	defer c.write.Unlock()
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		<-c.room
		return c.err
	}
	seq := c.next
	c.q = append(c.q, pending[T]{seq: seq, res: r, i: i, val: val})
	c.mu.Unlock()
	if err := write(); err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.q) == c.hd || c.q[len(c.q)-1].seq != seq {
			return nil // Fail resolved it with the channel's error
		}
		c.q[len(c.q)-1] = pending[T]{}
		c.q = c.q[:len(c.q)-1]
		<-c.room
		return err
	}
	c.next++
	return nil
}

// Mark calls f on the outstanding publishes, oldest first, until f
// returns true; f may change the value it is given (to note a return the
// confirm will follow, say).
func (c *ConfirmLedger[T]) Mark(f func(*T) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := c.hd; i < len(c.q); i++ {
		if f(&c.q[i].val) {
			return
		}
	}
}

// Confirm resolves every outstanding publish numbered up to seq with the
// error result returns for it (nil: confirmed).
func (c *ConfirmLedger[T]) Confirm(seq uint64, result func(*T) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ; c.hd < len(c.q) && c.q[c.hd].seq <= seq; c.hd++ {
		p := &c.q[c.hd]
		p.res.Resolve(p.i, result(&p.val))
		*p = pending[T]{}
		<-c.room
	}
	if c.hd == len(c.q) {
		c.q, c.hd = c.q[:0], 0
	} else if c.hd > 1024 && c.hd > len(c.q)/2 {
		n := copy(c.q, c.q[c.hd:])
		clear(c.q[n:])
		c.q, c.hd = c.q[:n], 0
	}
}

// Fail resolves every outstanding publish with err (the channel is lost:
// their confirms will never come); Publish refuses every later publish
// with err.
func (c *ConfirmLedger[T]) Fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	for _, p := range c.q[c.hd:] {
		p.res.Resolve(p.i, err)
		<-c.room
	}
	c.q, c.hd = nil, 0
}

// Err returns the error the ledger failed with, nil before Fail.
func (c *ConfirmLedger[T]) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
