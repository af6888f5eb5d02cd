package tck

import (
	"errors"
	"hash/fnv"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Observe records one pipeline event: a delivery received, settled, left
// unsettled or failed to settle. Plug it in with flow.WithObserver
// (Ledger.Observer does). It is called on the pipeline's hot path and only
// takes the ledger's lock.
func (l *Ledger) Observe(e flow.Event) {
	d := e.Delivery
	if d == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[*ports.Delivery]struct{}{}
	}
	if e.Received {
		l.open[d] = struct{}{}
		l.delivered(d.ID, l.positionOf(d), d.RedeliveryCount)
		return
	}
	if _, ok := l.open[d]; ok {
		delete(l.open, d)
	} else {
		// Received from the broker and abandoned before the pipeline
		// emitted it (the source was stopping): a delivery all the same.
		l.delivered(d.ID, l.positionOf(d), d.RedeliveryCount)
	}
	switch {
	case e.Action != 0:
		l.settled(d.ID, e.Action, d.RedeliveryCount)
	case e.Err != nil && l.deferred != nil && l.deferred(e.Err):
		l.outcome(d.ID, fateDeferred, d.RedeliveryCount)
	case errors.Is(e.Err, ports.ErrSettleInDoubt):
		l.outcome(d.ID, fateInDoubt, d.RedeliveryCount)
	case e.Err != nil:
		l.outcome(d.ID, fateSettleFailed, d.RedeliveryCount)
	default: // cancelled, or completed after stop
		l.outcome(d.ID, fateUnsettled, d.RedeliveryCount)
	}
}

// Observer is flow.WithObserver(l.Observe).
func (l *Ledger) Observer() flow.Option { return flow.WithObserver(l.Observe) }

// DeadLetterObserver records the messages a consumer of a dead-letter
// topic receives (Report.DeadLetterArrived); it records nothing else.
func (l *Ledger) DeadLetterObserver() flow.Option {
	return flow.WithObserver(func(e flow.Event) {
		if !e.Received || e.Delivery == nil {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		r := l.get(e.Delivery.ID)
		if r.flags&fDLQ == 0 {
			r.flags |= fDLQ
			l.c.dlqArrived++
			l.notify()
		}
	})
}

func (l *Ledger) positionOf(d *ports.Delivery) uint32 {
	if l.position == nil {
		return 0
	}
	return hashPosition(l.position(d))
}

// hashPosition is the compact form of a broker position (0: unknown),
// the same for a delivery observed here and one another process reports
// (Delivered), so that their positions compare.
func hashPosition(s string) uint32 {
	if s == "" {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	if v := h.Sum32(); v != 0 {
		return v
	}
	return 1
}

// Delivered records a delivery of id that no pipeline observer saw (a
// consumer in another process reporting over a pipe). position is the
// broker position, or "". Its outcome, if any, is recorded with Settled,
// SettleFailed or Unsettled; a delivery whose process died has none.
func (l *Ledger) Delivered(id, position string) {
	pos := hashPosition(position)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.external++
	l.delivered(id, pos, -1)
}

// Settled records a settlement the broker confirmed for a delivery
// recorded with Delivered.
func (l *Ledger) Settled(id string, a ports.Action) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.external--
	l.settled(id, a, -1)
}

// Died records that the process holding the deliveries of ids (recorded
// with Delivered) died before settling them: their next delivery falls in
// WindowInFlight, and they no longer count as in flight.
func (l *Ledger) Died(ids ...string) { l.died(fateDied, ids) }

// died records the death of the process holding ids with fate f.
func (l *Ledger) died(f fate, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.external -= len(ids)
	for _, id := range ids {
		r := l.get(id)
		l.transition(r, f)
		r.early = 0
	}
	l.notify()
}

// delivered records one delivery with its redelivery count (-1: unknown);
// l.mu must be held.
func (l *Ledger) delivered(id string, pos uint32, attempt int) {
	r := l.get(id)
	l.c.deliveries++
	if r.flags&(fAttempted|fPhantom) == 0 {
		r.flags |= fPhantom
		l.c.phantom++
		if len(l.phantoms) < sampleSize {
			l.phantoms = append(l.phantoms, id)
		}
	}
	switch {
	case r.deliveries > 0 && r.fate == fateOpen && attempt > int(r.attempt) && r.early < ^uint8(0):
		r.early++ // judged when the previous delivery's outcome arrives
	case r.deliveries > 0:
		var w Window
		switch r.fate {
		case fateOpen, fateDied, fateAckUnknown:
			w = WindowInFlight
		case fateUnsettled:
			w = WindowUnsettled
		case fateSettleFailed, fateDeferred, fateInDoubt:
			w = WindowSettleFailed
		case fateAcked, fateDead:
			switch {
			case r.sends > 1:
				w = WindowPublishRetry
			case pos != 0 && r.pos != 0 && pos != r.pos:
				w = WindowStoredTwice
			default:
				w = WindowAfterSettle
			}
		}
		if w != "" {
			l.duplicate(w)
		}
	}
	if r.deliveries < ^uint16(0) {
		r.deliveries++
	}
	if attempt >= 0 {
		r.attempt = uint16(min(attempt, int(^uint16(0))))
	}
	l.transition(r, fateOpen)
	if pos != 0 {
		r.pos = pos
	}
	if n := len(l.open) + l.external; n > l.peak {
		l.peak = n
	}
	l.notify()
}

func (l *Ledger) duplicate(w Window) {
	at := l.since()
	l.c.dups++
	s := l.windows[w]
	if s == nil {
		s = &WindowStat{First: at}
		l.windows[w] = s
	}
	s.Count++
	s.Last = at
}

// overtaken reports whether an outcome of a delivery with redelivery
// count attempt belongs to a delivery that a newer one overtook (see
// rec.early).
func (r *rec) overtaken(attempt int) bool {
	return r.early > 0 && attempt >= 0 && attempt < int(r.attempt)
}

// setFate records the fate of r's latest delivery, unless the outcome
// belongs to an older delivery.
func (l *Ledger) setFate(r *rec, f fate, attempt int) {
	if attempt < 0 || attempt >= int(r.attempt) {
		l.transition(r, f)
	}
}

// transition sets r's fate, keeping the count of unsettled messages whose
// last settlement was deferred.
func (l *Ledger) transition(r *rec, f fate) {
	open := r.flags&(fAcked|fDead) == 0
	if r.fate == fateDeferred && open {
		l.c.deferred--
	}
	if r.fate == fateAckUnknown && open {
		l.c.ackUnknown--
	}
	if r.fate == fateInDoubt && open {
		l.c.inDoubt--
	}
	r.fate = f
	if f == fateDeferred && open {
		l.c.deferred++
	}
	if f == fateAckUnknown && open {
		l.c.ackUnknown++
	}
	if f == fateInDoubt && open {
		l.c.inDoubt++
	}
}

// settled records a confirmed settlement of a delivery with redelivery
// count attempt (-1: unknown); l.mu must be held.
func (l *Ledger) settled(id string, a ports.Action, attempt int) {
	r := l.get(id)
	wasTerminal := r.flags&(fAcked|fDead) != 0
	if r.overtaken(attempt) {
		r.early--
		if a == ports.Requeue { // the copy that overtook it is its redelivery
			l.c.requeues++
			l.notify()
			return
		}
		l.duplicate(WindowInFlight)
	}
	switch a {
	case ports.Ack:
		l.setFate(r, fateAcked, attempt)
		r.acks = sat(r.acks)
		if r.flags&fAcked == 0 {
			r.flags |= fAcked
			l.c.acked++
		}
		l.recovered(r)
	case ports.DeadLetter:
		l.setFate(r, fateDead, attempt)
		r.deads = sat(r.deads)
		if r.flags&fDead == 0 {
			r.flags |= fDead
			l.c.dead++
		}
	case ports.Requeue:
		l.setFate(r, fateRequeued, attempt)
		l.c.requeues++
	}
	if !wasTerminal && r.flags&(fAcked|fDead) != 0 && r.fate == fateDeferred {
		l.c.deferred-- // settled after all: no longer counted as deferred
	}
	if !wasTerminal && r.flags&(fAcked|fDead) != 0 && r.fate == fateInDoubt {
		l.c.inDoubt-- // settled after all: no longer in doubt
	}
	if !wasTerminal && r.flags&(fAcked|fDead) != 0 && r.flags&fConfirmed != 0 {
		l.c.terminalConfirmed++
		l.drained(id)
	}
	l.notify()
}

// drained removes a settled id from the marks waiting for it.
func (l *Ledger) drained(id string) {
	for _, m := range l.marks {
		if m.Drained {
			continue
		}
		delete(m.pending, id)
		if len(m.pending) == 0 {
			m.Drained = true
			m.Drain = l.since() - m.At
		}
	}
}

// outcome records a delivery that ended without a settlement.
func (l *Ledger) outcome(id string, f fate, attempt int) {
	r := l.get(id)
	if r.overtaken(attempt) {
		r.early--
		l.duplicate(WindowInFlight)
	}
	l.setFate(r, f, attempt)
	if f == fateSettleFailed || f == fateDeferred || f == fateInDoubt {
		l.c.settleFailed++
	}
	l.notify()
}

// recovered closes the open recovery marks that r answers: an ack of a
// message first sent after the mark.
func (l *Ledger) recovered(r *rec) {
	if len(l.marks) == 0 || r.order == 0 {
		return
	}
	now := l.since()
	for _, m := range l.marks {
		if !m.Recovered && int(r.order) > m.attempts {
			m.Recovered = true
			m.After = now - m.At
		}
	}
}

func sat(n uint8) uint8 {
	if n < ^uint8(0) {
		n++
	}
	return n
}
