package kafka

import (
	"container/heap"
	"sync"
	"time"
)

// scheduler runs short callbacks at given times from one goroutine and one
// timer over a heap of due times (not a goroutine or timer per item). A
// callback must not block: it runs on the scheduler's goroutine.
type scheduler struct {
	mu      sync.Mutex
	items   timerHeap
	seq     uint64
	wake    chan struct{} // cap 1: the earliest due time changed
	stop    chan struct{}
	done    chan struct{}
	stopped bool
}

type timerItem struct {
	at  time.Time
	seq uint64 // FIFO among equal times
	fn  func()
}

type timerHeap []timerItem

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerItem)) }
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = timerItem{}
	*h = old[:len(old)-1]
	return it
}

func newScheduler() *scheduler {
	s := &scheduler{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s
}

// at schedules fn for t. It reports false (and drops fn) after close.
func (s *scheduler) at(t time.Time, fn func()) bool {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return false
	}
	s.seq++
	heap.Push(&s.items, timerItem{at: t, seq: s.seq, fn: fn})
	first := s.items[0].seq == s.seq
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return true
}

func (s *scheduler) run() {
	defer close(s.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var due []func()
		s.mu.Lock()
		now := time.Now()
		for len(s.items) > 0 && !s.items[0].at.After(now) {
			due = append(due, heap.Pop(&s.items).(timerItem).fn)
		}
		next := time.Hour
		if len(s.items) > 0 {
			next = s.items[0].at.Sub(now)
		}
		s.mu.Unlock()
		for _, fn := range due {
			fn()
		}
		if len(due) > 0 {
			continue // callbacks took time; look again before sleeping
		}
		t.Reset(next)
		select {
		case <-t.C:
		case <-s.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		case <-s.stop:
			return
		}
	}
}

// close stops the scheduler; pending callbacks are dropped.
func (s *scheduler) close() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.done
		return
	}
	s.stopped = true
	s.items = nil
	s.mu.Unlock()
	close(s.stop)
	<-s.done
}
