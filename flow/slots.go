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
	wake  chan struct{} // closed when a slot is released and someone waits
}

func newSlots(limit int) *slots { return &slots{limit: limit} }

// acquire blocks until at least one slot is free, then takes up to max.
func (s *slots) acquire(ctx context.Context, max int) (int, error) {
	for {
		s.mu.Lock()
		if free := s.limit - s.used; free > 0 {
			n := min(free, max)
			s.used += n
			s.mu.Unlock()
			return n, nil
		}
		w := s.waiter()
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// waiter returns the channel to wait on; s.mu must be held.
func (s *slots) waiter() chan struct{} {
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

func (s *slots) release(n int) {
	s.mu.Lock()
	s.used -= n
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
	s.mu.Unlock()
}

// waitIdle blocks until no slot is in use or ctx is done.
func (s *slots) waitIdle(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.used == 0 {
			s.mu.Unlock()
			return nil
		}
		w := s.waiter()
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
