package kit

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
)

// RecordLock is the lock a held record is under, kept in its handle
// (embedded) so that reading or moving it takes no table lock: when the
// record was last handed out and when its lock ends; and where its
// Renewals table holds it.
type RecordLock struct {
	out, until atomic.Int64 // UnixNano
	at         int          // 1 + its index in the table; 0: not held (the table's lock)
}

func (l *RecordLock) recordLock() *RecordLock { return l }

// Held reports whether the lock has not ended at now.
func (l *RecordLock) Held(now time.Time) bool { return now.UnixNano() < l.until.Load() }

// Ends sets when the lock ends (acquired or renewed).
func (l *RecordLock) Ends(until time.Time) { l.until.Store(until.UnixNano()) }

// Locked is a handle that embeds a RecordLock.
type Locked interface {
	comparable
	recordLock() *RecordLock
}

// Renewals is a subscription's table of the records it holds under a lock
// the broker lets lapse (an acquisition lock, an invisibility timeout),
// each with its RecordLock. Due picks the ones whose lock to renew, up to a
// bound after they were handed out, and forgets those whose lock has
// ended, renewed or not: the broker has taken them back, so a record
// nobody settles is not held for ever. The zero value is ready; it is
// safe for concurrent use.
type Renewals[K Locked] struct {
	mu sync.Mutex
	ks []K // each k at k.recordLock().at-1
}

// Hold holds ks, handed out at out, each locked until its RecordLock
// Ends.
func (r *Renewals[K]) Hold(out time.Time, ks ...K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range ks {
		r.holdLocked(out, k)
	}
}

// HoldRecords is Hold of the handles of recs (each a K).
func (r *Renewals[K]) HoldRecords(out time.Time, recs []driver.Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range recs {
		r.holdLocked(out, recs[i].Handle.(K))
	}
}

// holdLocked holds k, handed out at out (once in the table).
func (r *Renewals[K]) holdLocked(out time.Time, k K) {
	l := k.recordLock()
	l.out.Store(out.UnixNano())
	if l.at == 0 {
		r.ks = append(r.ks, k)
		l.at = len(r.ks)
	}
}

// OutRecords restarts the renewal bound of the handles of recs (each a
// K): handed out (again) at at.
func (r *Renewals[K]) OutRecords(at time.Time, recs []driver.Record) {
	for i := range recs {
		recs[i].Handle.(K).recordLock().out.Store(at.UnixNano())
	}
}

// Drop forgets ks: settled.
func (r *Renewals[K]) Drop(ks ...K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range ks {
		r.dropLocked(k)
	}
}

// dropLocked forgets k, moving the last one held into its place.
func (r *Renewals[K]) dropLocked(k K) {
	l := k.recordLock()
	if l.at == 0 {
		return
	}
	i, last := l.at-1, len(r.ks)-1
	r.ks[i] = r.ks[last]
	r.ks[i].recordLock().at = i + 1
	var zero K
	r.ks[last], r.ks, l.at = zero, r.ks[:last], 0
}

// Len returns how many records are held.
func (r *Renewals[K]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ks)
}

// Keys returns the held records.
func (r *Renewals[K]) Keys() []K {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ks)
}

// Due forgets the records whose lock ended by now and returns the held
// ones whose lock ends within ahead of now and that were handed out less
// than bound ago (a negative bound: none).
func (r *Renewals[K]) Due(now time.Time, ahead, bound time.Duration) []K {
	r.mu.Lock()
	defer r.mu.Unlock()
	var due []K
	t := now.UnixNano()
	for i := len(r.ks) - 1; i >= 0; i-- { // a drop moves a visited one into i
		k := r.ks[i]
		l := k.recordLock()
		if until := l.until.Load(); t >= until {
			r.dropLocked(k)
		} else if time.Duration(until-t) < ahead && time.Duration(t-l.out.Load()) < bound {
			due = append(due, k)
		}
	}
	return due
}
