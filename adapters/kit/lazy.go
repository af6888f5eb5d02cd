package kit

import (
	"context"

	"github.com/sluicemq/sluice/ports"
)

// Lazy is a connection (a client, a channel) that a driver opens on its
// first use and again on the first use after it was lost: the driver's
// reconnect on its next call, the portable layer's backoff between calls.
// It is safe for concurrent use; a call waiting while another opens the
// connection gives up when its ctx is done.
type Lazy[C comparable] struct {
	open   func(context.Context) (C, error)
	alive  func(C) bool
	lock   chan struct{} // a mutex that can be abandoned on ctx
	cur    C
	closed bool
}

// NewLazy returns a Lazy that opens connections with open; alive reports
// whether one is still usable.
func NewLazy[C comparable](open func(context.Context) (C, error), alive func(C) bool) *Lazy[C] {
	return &Lazy[C]{open: open, alive: alive, lock: make(chan struct{}, 1)}
}

// acquire takes the lock: at once when it is free (ctx done or not), else
// when it is given back or ctx is done.
func (l *Lazy[C]) acquire(ctx context.Context) error {
	select {
	case l.lock <- struct{}{}:
		return nil
	default:
	}
	select {
	case l.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Get returns the connection, opening one when there is none or the last
// one was lost; ports.ErrClosed after Close.
func (l *Lazy[C]) Get(ctx context.Context) (C, error) {
	var zero C
	if err := l.acquire(ctx); err != nil {
		return zero, err
	}
	defer func() { <-l.lock }()
	if l.closed {
		return zero, ports.ErrClosed
	}
	if l.cur == zero || !l.alive(l.cur) {
		c, err := l.open(ctx)
		if err != nil {
			l.cur = zero
			return zero, err
		}
		l.cur = c
	}
	return l.cur, nil
}

// Close makes every later Get fail with ports.ErrClosed and closes the
// connection, if there is one, with close.
func (l *Lazy[C]) Close(ctx context.Context, close func(C) error) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer func() { <-l.lock }()
	l.closed = true
	var zero C
	if l.cur == zero {
		return nil
	}
	c := l.cur
	l.cur = zero
	return close(c)
}
