package kafkaqueue

import (
	"sync"
	"time"
)

// holds is a subscription's table of the records it holds acquired and
// not settled (kit.Renewals' rules, which it replaces on this hot path):
// when each was handed out and when its lock ends. Due picks the ones
// whose lock to renew, up to a bound after they were handed out, and
// forgets those whose lock has ended, renewed or not: the broker has taken
// them back. The records are linked through their handles, so that
// holding and dropping one costs no map operation. The zero value is
// ready; it is safe for concurrent use.
type holds struct {
	mu    sync.Mutex
	first *handle
	n     int
}

// link is a handle's place in a holds.
type link struct {
	prev, next *handle
	held       bool
	out        int64 // handed out (UnixNano)
}

// Hold holds hs, handed out at out, their locks ending at until.
func (t *holds) Hold(out, until time.Time, hs ...*handle) {
	o, u := out.UnixNano(), until.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range hs {
		h.until.Store(u)
		h.link.out = o
		if h.link.held {
			continue
		}
		h.link = link{next: t.first, held: true, out: o}
		if t.first != nil {
			t.first.link.prev = h
		}
		t.first = h
		t.n++
	}
}

// Out restarts the bound of the held hs: handed out (again) at at.
func (t *holds) Out(at time.Time, hs ...*handle) {
	o := at.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range hs {
		if h.link.held {
			h.link.out = o
		}
	}
}

// Renewed moves the end of the locks of the held hs to until.
func (t *holds) Renewed(until time.Time, hs ...*handle) {
	u := until.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range hs {
		if h.link.held {
			h.until.Store(u)
		}
	}
}

// Drop forgets hs: settled.
func (t *holds) Drop(hs ...*handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range hs {
		t.unlink(h)
	}
}

func (t *holds) unlink(h *handle) {
	if !h.link.held {
		return
	}
	if h.link.prev != nil {
		h.link.prev.link.next = h.link.next
	} else {
		t.first = h.link.next
	}
	if h.link.next != nil {
		h.link.next.link.prev = h.link.prev
	}
	h.link = link{}
	t.n--
}

// Len returns how many records are held.
func (t *holds) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// Due forgets the records whose lock ended by now and returns the held
// ones whose lock ends within ahead of now and that were handed out less
// than bound ago (a negative bound: none).
func (t *holds) Due(now time.Time, ahead, bound time.Duration) []*handle {
	n := now.UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	var due []*handle
	for h := t.first; h != nil; {
		next := h.link.next
		if until := h.until.Load(); n >= until {
			t.unlink(h)
		} else if time.Duration(until-n) < ahead && time.Duration(n-h.link.out) < bound {
			due = append(due, h)
		}
		h = next
	}
	return due
}
