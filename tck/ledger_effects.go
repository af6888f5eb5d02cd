package tck

import (
	"slices"
	"strconv"
	"strings"
)

// Effects records, once a test is over, how many business effects each
// message had: effects maps a message id to the number of effect rows
// (or other records) its handling left, counted by the test from where
// the effect lives (a database table). The report then counts, over the
// confirmed messages:
//
//	no-effect  = confirmed messages without an effect (counted as lost too)
//	dup-effects = messages with more than one effect
//
// and Check fails on either. An effect of an id nobody sent is a phantom
// effect and fails Check too. Call it after the consumers stopped; a
// later call replaces the counts.
func (l *Ledger) Effects(effects map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.effects = make(map[string]int, len(effects))
	for id, n := range effects {
		if n > 0 {
			l.effects[id] = n
		}
	}
	l.effectsSet = true
	l.notify()
}

// Suppressed records that a delivery of id was found already handled by
// an idempotent consumer (an exactly-once inbox) and acked without a
// second effect: a duplicate delivery absorbed. Its settlement is still
// recorded as usual (Observe, or Settled for another process).
func (l *Ledger) Suppressed(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.suppressed++
	l.notify()
}

// DiedAfterEffect records, like Died, that the process holding the
// deliveries of ids died before it reported their settlement, and that
// it had reported their effect committed: the ack may have reached the
// broker before the process died, and then no redelivery follows. Such a
// message, unless it is settled later, is not lost when Effects shows its
// effect (Report.AckUnknownEffected); without Effects it is.
// Counts.AckUnknown counts them while they are not settled.
func (l *Ledger) DiedAfterEffect(ids ...string) { l.died(fateAckUnknown, ids) }

// Unsettled records that a delivery recorded with Delivered (a consumer
// in another process reporting over a pipe) ended without a settlement:
// cancelled, or completed after its pipeline stopped.
func (l *Ledger) Unsettled(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.external--
	l.outcome(id, fateUnsettled, -1)
}

// SettleFailed records that the settlement of a delivery recorded with
// Delivered failed; deferred says the adapter keeps the settlement (what
// SetDeferred's function said of the error, judged where it happened).
func (l *Ledger) SettleFailed(id string, deferred bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.external--
	if deferred {
		l.outcome(id, fateDeferred, -1)
	} else {
		l.outcome(id, fateSettleFailed, -1)
	}
}

// EffectReport is what Effects let the report conclude.
type EffectReport struct {
	// Counted: Effects was called; the fields below mean something.
	Counted bool
	// Distinct is the number of messages with at least one effect.
	Distinct int
	// NoEffect counts confirmed messages without an effect (each is in
	// Report.Lost as well); NoEffectSample lists some.
	NoEffect       int
	NoEffectSample []string
	// DupEffects counts messages with more than one effect;
	// DupEffectSample lists some, DupEffectRows counts the extra rows.
	DupEffects      int
	DupEffectRows   int
	DupEffectSample []string
	// PhantomEffects counts ids with an effect that were never sent.
	PhantomEffects int
	// Suppressed counts duplicate deliveries an idempotent consumer
	// absorbed (Suppressed).
	Suppressed int
}

// effectReportLocked scans the effect counts against the messages;
// l.mu must be held.
func (l *Ledger) effectReportLocked() EffectReport {
	er := EffectReport{Counted: l.effectsSet, Suppressed: l.suppressed}
	if !l.effectsSet {
		return er
	}
	er.Distinct = len(l.effects)
	ids := make([]string, 0, len(l.effects))
	for id := range l.effects {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := l.effects[id]
		if x := l.peek(id); x == nil || x.flags&fAttempted == 0 {
			er.PhantomEffects++
			continue
		}
		if n > 1 {
			er.DupEffects++
			er.DupEffectRows += n - 1
			if len(er.DupEffectSample) < sampleSize {
				er.DupEffectSample = append(er.DupEffectSample, id+"×"+strconv.Itoa(n))
			}
		}
	}
	noEffect := func(x *rec, id func() string) {
		if x.flags&fConfirmed != 0 && l.effects[id()] == 0 {
			er.NoEffect++
			if len(er.NoEffectSample) < sampleSize {
				er.NoEffectSample = append(er.NoEffectSample, id())
			}
		}
	}
	for i := range l.minted {
		noEffect(&l.minted[i], func() string { return l.prefix + strconv.FormatUint(uint64(i), 36) })
	}
	for id, x := range l.foreign {
		noEffect(x, func() string { return id })
	}
	return er
}

// peek returns id's record without creating it; l.mu must be held.
func (l *Ledger) peek(id string) *rec {
	if rest, ok := strings.CutPrefix(id, l.prefix); ok {
		if n, err := strconv.ParseUint(rest, 36, 63); err == nil && n < uint64(len(l.minted)) {
			return &l.minted[n]
		}
	}
	return l.foreign[id]
}
