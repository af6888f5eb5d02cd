package kit

import (
	"context"
	"sync"
	"time"
)

// Periodic runs the background timers of a driver or of one of its
// subscriptions — lease renewals, heartbeats, movers of due messages,
// janitors — each on a goroutine of its own, until Stop. Make it with
// NewPeriodic; it is safe for concurrent use.
type Periodic struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewPeriodic returns a Periodic running no timer yet.
func NewPeriodic() *Periodic {
	p := &Periodic{}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// Every calls f at once, then again after the duration f returns: period
// when f returns zero or less, or more than period. The context f gets
// ends at Stop, and f is not called once Stop has returned. Every must not
// be called after Stop.
func (p *Periodic) Every(period time.Duration, f func(context.Context) time.Duration) {
	p.wg.Go(func() {
		for p.ctx.Err() == nil {
			next := f(p.ctx)
			if next <= 0 || next > period {
				next = period
			}
			select {
			case <-p.ctx.Done():
			case <-time.After(next):
			}
		}
	})
}

// Stop ends the context of every timer and waits until each has returned,
// or until ctx ends (ctx.Err(); the timers return on their own later).
// It may be called more than once.
func (p *Periodic) Stop(ctx context.Context) error {
	p.cancel()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
