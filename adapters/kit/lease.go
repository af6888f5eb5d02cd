package kit

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Lease is a claim that one holder at a time may have, across processes:
// a key with an expiry that the broker sets only when it is absent or
// already the holder's (Redis SET NX PX under a token, a lock with a TTL
// in any store that has one). A driver uses it where its broker has no
// such claim of its own: to refuse a second running subscription of a
// Broadcast Instance, to let one reader of a single-active group read.
// A holder that does not renew it within its TTL loses it to the next
// taker; run [Lease.Keep] with [Periodic.Every] to renew it.
type Lease struct {
	ttl   time.Duration
	take  func(context.Context) (bool, error)
	drop  func(context.Context) error
	log   *slog.Logger
	lost  atomic.Pointer[func(error)] // OnLost's
	held  atomic.Bool
	taken atomic.Bool   // a try took it once: Release gives it up
	wake  chan struct{} // signalled when held turns true
}

// NewLease returns a lease of ttl, not held yet. take takes the lease, or
// renews it when this holder has it, and reports whether this holder has
// it; drop gives it up if this holder still has it. log (with attributes
// that name the lease) gets an Info line when the lease is taken and a
// Warn line when it is lost or a try fails.
func NewLease(ttl time.Duration, take func(context.Context) (bool, error), drop func(context.Context) error, log *slog.Logger) *Lease {
	return &Lease{ttl: ttl, take: take, drop: drop, log: log, wake: make(chan struct{}, 1)}
}

// OnLost makes f report the loss of a held lease instead of a Warn line
// (a driver passes its [driver.Reporter] function, wrapped with what the
// lease guards). f must not block.
func (l *Lease) OnLost(f func(error)) { l.lost.Store(&f) }

// TTL is the lease's expiry at the broker.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Try takes or renews the lease once and reports whether it is held.
func (l *Lease) Try(ctx context.Context) (bool, error) {
	ok, err := l.take(ctx)
	if err != nil && ctx.Err() != nil {
		// Cut short (the holder is closing): the broker may have renewed
		// it; whether it is held is unknown, and not a loss.
		return false, err
	}
	ok = ok && err == nil
	if ok {
		l.taken.Store(true)
	}
	switch {
	case ok && !l.held.Swap(true):
		l.log.Info("sluice: lease taken")
		Signal(l.wake)
	case !ok && l.held.Swap(false):
		if f := l.lost.Load(); f != nil {
			(*f)(fmt.Errorf("lease lost: another holder has it, or it could not be renewed within its TTL %v (last try: %v)", l.ttl, err))
		} else {
			l.log.Warn("sluice: lease lost: another holder has it, or it could not be renewed within its TTL", "ttl", l.ttl, "err", err)
		}
	case err != nil && ctx.Err() == nil:
		l.log.Warn("sluice: lease not taken", "err", err)
	}
	return ok, err
}

// Keep tries the lease once and returns when to try again: a third of the
// TTL while it is held, a quarter while it is not.
func (l *Lease) Keep(ctx context.Context) time.Duration {
	if ok, _ := l.Try(ctx); ok {
		return l.ttl / 3
	}
	return l.ttl / 4
}

// Held reports whether the last try took or renewed the lease. A holder
// that could not renew may still believe it holds the lease for up to a
// renewal period after it expired.
func (l *Lease) Held() bool { return l.held.Load() }

// Wait blocks while the lease is not held; false when ctx ended first.
func (l *Lease) Wait(ctx context.Context) bool {
	for !l.held.Load() {
		select {
		case <-l.wake:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Release gives the lease up if a try ever took it (a renewal that
// failed may still have renewed it at the broker), waiting a second at
// most (a lease not given up expires after its TTL anyway). Stop the
// timer that keeps it first. A nil Lease is not held.
func (l *Lease) Release() {
	if l != nil && l.taken.Swap(false) {
		l.held.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = l.drop(ctx)
	}
}
