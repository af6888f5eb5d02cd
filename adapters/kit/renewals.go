package kit

import (
	"sync"
	"time"
)

// Renewals is a subscription's table of the records it holds under a lock
// the broker lets lapse (an acquisition lock, an invisibility timeout):
// when each was handed out and when its lock ends. Due picks the ones whose
// lock to renew, up to a bound after they were handed out, and forgets
// those whose lock has ended, renewed or not: the broker has taken them
// back, so a record nobody settles is not held for ever. The zero value is
// ready; it is safe for concurrent use.
type Renewals[K comparable] struct {
	mu sync.Mutex
	m  map[K]renewal
}

type renewal struct{ out, until time.Time }

// Hold holds ks, handed out at out, their locks ending at until.
func (r *Renewals[K]) Hold(out, until time.Time, ks ...K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[K]renewal{}
	}
	for _, k := range ks {
		r.m[k] = renewal{out, until}
	}
}

// Out restarts the bound of the held ks: handed out (again) at at.
func (r *Renewals[K]) Out(at time.Time, ks ...K) {
	r.set(ks, func(x *renewal) { x.out = at })
}

// Renewed moves the end of the locks of the held ks to until.
func (r *Renewals[K]) Renewed(until time.Time, ks ...K) {
	r.set(ks, func(x *renewal) { x.until = until })
}

func (r *Renewals[K]) set(ks []K, f func(*renewal)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range ks {
		if x, ok := r.m[k]; ok {
			f(&x)
			r.m[k] = x
		}
	}
}

// Drop forgets ks: settled.
func (r *Renewals[K]) Drop(ks ...K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range ks {
		delete(r.m, k)
	}
}

// Keys returns the held records.
func (r *Renewals[K]) Keys() []K {
	r.mu.Lock()
	defer r.mu.Unlock()
	ks := make([]K, 0, len(r.m))
	for k := range r.m {
		ks = append(ks, k)
	}
	return ks
}

// Len returns how many records are held.
func (r *Renewals[K]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// Due forgets the records whose lock ended by now and returns the held
// ones whose lock ends within ahead of now and that were handed out less
// than bound ago (a negative bound: none).
func (r *Renewals[K]) Due(now time.Time, ahead, bound time.Duration) []K {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []K
	for k, x := range r.m {
		if !now.Before(x.until) {
			delete(r.m, k)
		} else if x.until.Sub(now) < ahead && now.Sub(x.out) < bound {
			due = append(due, k)
		}
	}
	return due
}
