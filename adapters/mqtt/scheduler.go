package mqtt

import (
	"container/heap"
	"sync"
	"time"
)

// scheduler holds entries until their due time and then hands each to fire.
// It is the adapter's local scheduler for delayed messages and requeue
// backoffs: one goroutine and one timer for the whole subscription, with
// the pending entries in a min-heap by due time (not a goroutine or timer
// per message).
type scheduler struct {
	fire func(*entry)

	mu      sync.Mutex
	h       dueHeap
	wake    chan struct{}
	stopped bool
	stop    chan struct{}
	done    chan struct{}
}

func newScheduler(fire func(*entry)) *scheduler {
	s := &scheduler{fire: fire, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// add schedules e for due. It reports false after close.
func (s *scheduler) add(e *entry, due time.Time) bool {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return false
	}
	e.due = due
	heap.Push(&s.h, e)
	first := s.h[0] == e
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// len is the number of pending entries.
func (s *scheduler) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

// close stops the scheduler and waits for its goroutine; pending entries
// are dropped (they were never acknowledged, so the broker redelivers them).
func (s *scheduler) close() {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.stop)
	}
	s.mu.Unlock()
	<-s.done
}

func (s *scheduler) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*entry
	for {
		s.mu.Lock()
		now := time.Now()
		for len(s.h) > 0 && !s.h[0].due.After(now) {
			due = append(due, heap.Pop(&s.h).(*entry))
		}
		wait := time.Hour
		if len(s.h) > 0 {
			wait = s.h[0].due.Sub(now)
		}
		s.mu.Unlock()
		for i, e := range due {
			s.fire(e)
			due[i] = nil
		}
		due = due[:0]
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-s.stop:
			return
		}
	}
}

// dueHeap is a min-heap of entries by due time.
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*entry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
