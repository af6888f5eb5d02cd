package kit

import (
	"sync"
	"sync/atomic"
)

// Errors is the channel behind ports.Subscription.Errors: reporting never
// blocks. When the buffer is full the error is dropped and counted
// ([Errors.Dropped]); after Close reports are dropped and counted too. The
// zero value is not usable; call NewErrors.
type Errors struct {
	mu      sync.Mutex
	ch      chan error
	closed  bool
	dropped atomic.Uint64
}

// NewErrors returns an Errors buffering up to size errors (size < 1: 1).
func NewErrors(size int) *Errors {
	return &Errors{ch: make(chan error, max(size, 1))}
}

// C returns the receive side, for Subscription.Errors. It is closed by
// Close.
func (e *Errors) C() <-chan error { return e.ch }

// Report hands err to the reader without blocking. It reports false when
// err was dropped (buffer full, or Errors closed). A nil err is ignored
// and reports true.
func (e *Errors) Report(err error) bool {
	if err == nil {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		select {
		case e.ch <- err:
			return true
		default:
		}
	}
	e.dropped.Add(1)
	return false
}

// Dropped returns how many errors were dropped so far.
func (e *Errors) Dropped() uint64 { return e.dropped.Load() }

// Close closes the channel once; buffered errors stay readable. It is
// idempotent and safe to call concurrently with Report.
func (e *Errors) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
}
