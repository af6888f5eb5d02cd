package flow

import "sync/atomic"

type counters struct {
	received, acked, requeued, deadLettered atomic.Int64
	cancelled, unsettled, filtered          atomic.Int64
	settleErrors, conflicts, errors         atomic.Int64
	inFlight, settleCalls                   atomic.Int64
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
