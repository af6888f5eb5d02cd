package flow

import (
	"context"
	"sync"
)

// slots bounds the deliveries in flight: the source takes slots before
// receiving and settlement gives them back.
type slots struct {
	mu    sync.Mutex
	used  int
	limit int
	// freed has room for one signal: a release leaves one there for
	// acquire, which only the receive loop calls. A signal left while
	// nobody waits makes acquire look once more. Unlike a channel closed
	// and made again, it costs no allocation when the window is full and
	// every settlement wakes the receive loop.
	freed chan struct{}
	idle  chan struct{} // closed when a slot is released and waitIdle waits
}

func newSlots(limit int) *slots { return &slots{limit: limit, freed: make(chan struct{}, 1)} }

// acquire blocks until at least one slot is free, then takes up to max.
// It is called from one goroutine (the receive loop). While none is free
// it first calls full, which may release slots itself (the engine's
// settleHere) and reports whether it did.
func (s *slots) acquire(ctx context.Context, max int, full func() bool) (int, error) {
	for {
		s.mu.Lock()
		if free := s.limit - s.used; free > 0 {
			n := min(free, max)
			s.used += n
			s.mu.Unlock()
			return n, nil
		}
		s.mu.Unlock()
		if full != nil && full() {
			continue
		}
		select {
		case <-s.freed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// free is the number of slots not in use.
func (s *slots) free() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit - s.used
}

func (s *slots) release(n int) {
	s.mu.Lock()
	s.used -= n
	if s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default: // a signal is pending already
	}
}

// waitIdle blocks until no slot is in use or ctx is done.
func (s *slots) waitIdle(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.used == 0 {
			s.mu.Unlock()
			return nil
		}
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		w := s.idle
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
