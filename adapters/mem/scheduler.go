package mem

import (
	"sync"
	"time"
)

// entryKind says what a scheduler entry does when it is due.
type entryKind uint8

const (
	// routeMessage routes a delayed message to its topic's queues.
	routeMessage entryKind = iota + 1
	// requeueItem puts a requeued item back at the end of its queue.
	requeueItem
	// expireQueue deletes an idle broadcast queue whose TTL ran out.
	expireQueue
)

// entry is one scheduled action. Entries are stored by value in the heap,
// so scheduling allocates nothing beyond the heap's amortised growth.
type entry struct {
	due  time.Time
	seq  uint64 // ties on due keep scheduling order
	kind entryKind
	q    *queue // requeueItem, expireQueue
	it   item   // requeueItem; it.msg for routeMessage
	ns   string // routeMessage: the namespace to route in
	gen  uint64 // expireQueue: the queue generation that armed it
}

func (e *entry) before(o *entry) bool {
	if e.due.Equal(o.due) {
		return e.seq < o.seq
	}
	return e.due.Before(o.due)
}

// scheduler holds everything that must happen later: delayed messages,
// delayed requeues and instance expiry. It is one binary min-heap per
// broker driven by a single timer armed for the earliest deadline — no
// goroutine per entry and no goroutine at all while idle. When the timer
// fires, every due entry is popped under the lock and run outside it.
type scheduler struct {
	clock Clock
	run   func([]entry) // runs due entries, outside mu

	mu     sync.Mutex
	heap   []entry
	seq    uint64
	timer  Timer     // nil until first armed
	armed  time.Time // deadline the timer is armed for; zero when disarmed
	closed bool
	routes int // routeMessage entries pending (for Stats)
}

func newScheduler(c Clock, run func([]entry)) *scheduler {
	return &scheduler{clock: c, run: run}
}

// add schedules e. It reports false, scheduling nothing, after close.
func (s *scheduler) add(e entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.seq++
	e.seq = s.seq
	if e.kind == routeMessage {
		s.routes++
	}
	s.heap = append(s.heap, e)
	s.up(len(s.heap) - 1)
	if s.armed.IsZero() || e.due.Before(s.armed) {
		s.armLocked(e.due)
	}
	return true
}

// armLocked (re)arms the single timer for due.
func (s *scheduler) armLocked(due time.Time) {
	s.armed = due
	d := max(due.Sub(s.clock.Now()), 0)
	if s.timer == nil {
		s.timer = s.clock.AfterFunc(d, s.fire)
		return
	}
	s.timer.Reset(d)
}

// fire pops every due entry, re-arms for the next one and runs the due
// entries in order. A spurious or late call is harmless.
func (s *scheduler) fire() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	now := s.clock.Now()
	var due []entry
	for len(s.heap) > 0 && !s.heap[0].due.After(now) {
		e := s.pop()
		if e.kind == routeMessage {
			s.routes--
		}
		due = append(due, e)
	}
	s.armed = time.Time{}
	if len(s.heap) > 0 {
		s.armLocked(s.heap[0].due)
	} else if cap(s.heap) > 4096 {
		s.heap = nil // a drained burst gives its memory back
	}
	s.mu.Unlock()
	if len(due) > 0 {
		s.run(due)
	}
}

// close drops every pending entry without running it and stops the
// timer. Later adds report false.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.heap = nil
	s.routes = 0
	if s.timer != nil {
		s.timer.Stop()
	}
}

// counts returns the pending entries and, of them, the delayed messages.
func (s *scheduler) counts() (entries, routes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heap), s.routes
}

func (s *scheduler) pop() entry {
	h := s.heap
	e := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = entry{} // release references
	s.heap = h[:last]
	if last > 0 {
		s.down(0)
	}
	return e
}

func (s *scheduler) up(i int) {
	h := s.heap
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].before(&h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (s *scheduler) down(i int) {
	h := s.heap
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].before(&h[l]) {
			m = r
		}
		if !h[m].before(&h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
