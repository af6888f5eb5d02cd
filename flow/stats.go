package flow

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

type counters struct {
	received                        atomic.Int64
	acked, requeued, deadLettered   notifyCounter
	settled                         settleSignal
	cancelled, unsettled, filtered  atomic.Int64
	settleErrors, conflicts, errors atomic.Int64
	inFlight, settleCalls           atomic.Int64
}

// Stats counts what a pipeline did with its deliveries so far.
type Stats struct {
	Received     int64 // deliveries received from the adapter
	Acked        int64 // settled ACK (including filtered ones)
	Requeued     int64 // settled REQUEUE
	DeadLettered int64 // settled DEAD_LETTER
	Cancelled    int64 // completed as cancelled: not settled
	Unsettled    int64 // completed after stop: not settled
	Filtered     int64 // acked without handling (key filter)
	SettleErrors int64 // settlements the adapter failed (left unsettled)
	Conflicts    int64 // conflicting second completions refused
	Errors       int64 // every error reported to the error handler
	InFlight     int64 // received and not yet settled (or given up)
	SettleCalls  int64 // calls to the adapter's Settle (one per coalesced round and disposition)
}

// Stats returns a snapshot of the pipeline's counters.
func (p *Pipeline) Stats() Stats {
	s := Stats{
		Received:     p.stats.received.Load(),
		Acked:        p.stats.acked.Load(),
		Requeued:     p.stats.requeued.Load(),
		DeadLettered: p.stats.deadLettered.Load(),
		Cancelled:    p.stats.cancelled.Load(),
		Unsettled:    p.stats.unsettled.Load(),
		Filtered:     p.stats.filtered.Load(),
		SettleErrors: p.stats.settleErrors.Load(),
		Conflicts:    p.stats.conflicts.Load(),
		Errors:       p.stats.errors.Load(),
		SettleCalls:  p.stats.settleCalls.Load(),
	}
	s.InFlight = p.stats.inFlight.Load()
	return s
}

// Settled is the number of deliveries settled so far: Acked + Requeued +
// DeadLettered.
func (s Stats) Settled() int64 { return s.Acked + s.Requeued + s.DeadLettered }

// WaitSettled blocks until at least n deliveries have been settled (see
// Stats.Settled), ctx is done, or the pipeline has stopped short of n. It
// is the bounded wait tests and tools need instead of polling Stats; the
// error says how far the pipeline got.
func (p *Pipeline) WaitSettled(ctx context.Context, n int64) error {
	for {
		w := p.stats.settled.wait()
		st := p.Stats()
		if st.Settled() >= n {
			return nil
		}
		select {
		case <-w:
		case <-ctx.Done():
			return fmt.Errorf("flow: waiting for %d settled deliveries on %s: %w (settled %d: %+v)", n, p.spec.Topic, ctx.Err(), st.Settled(), st)
		case <-p.done:
			if st = p.Stats(); st.Settled() >= n {
				return nil
			}
			return fmt.Errorf("flow: pipeline on %s stopped after %d of %d settled deliveries (%+v)", p.spec.Topic, st.Settled(), n, st)
		}
	}
}

// notifyCounter is a counter whose increments wake WaitSettled.
type notifyCounter struct {
	atomic.Int64
	n *settleSignal
}

// Add adds d and wakes the waiters, if any.
func (c *notifyCounter) Add(d int64) int64 {
	v := c.Int64.Add(d)
	if c.n != nil {
		c.n.notify()
	}
	return v
}

// settleSignal wakes waiters on change; free when nobody waits.
type settleSignal struct {
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
}

func (n *settleSignal) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	n.waiting.Store(true)
	return n.ch
}

func (n *settleSignal) notify() {
	if !n.waiting.Load() {
		return
	}
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.waiting.Store(false)
	n.mu.Unlock()
}
