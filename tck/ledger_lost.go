package tck

import "strconv"

// LostIDs returns every message the report would count as lost: confirmed,
// never acked nor dead-lettered, and not deferred by the adapter. A test
// that excuses a loss must judge each of these ids, not a sample.
func (l *Ledger) LostIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	lost := func(x *rec, id string) bool {
		if x.flags&fConfirmed != 0 && x.flags&(fAcked|fDead) == 0 && x.fate != fateDeferred {
			return !(l.effectsSet && x.fate == fateAckUnknown && l.effects[id] > 0) // see Report.AckUnknownEffected
		}
		return l.effectsSet && x.flags&fConfirmed != 0 && l.effects[id] == 0 // settled without an effect (Effects)
	}
	for i := range l.minted {
		if id := l.prefix + strconv.FormatUint(uint64(i), 36); lost(&l.minted[i], id) {
			out = append(out, id)
		}
	}
	for id, x := range l.foreign {
		if lost(x, id) {
			out = append(out, id)
		}
	}
	return out
}

// MissingDeadLetters returns the messages whose dead-letter settlement was
// confirmed (Settled with ports.DeadLetter, or observed) but that no
// consumer of the dead-letter topic has seen (DeadLetterObserver): a
// dead-letter copy the broker confirmed and then lost, when the test
// drained the dead-letter topic.
func (l *Ledger) MissingDeadLetters() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i := range l.minted {
		if x := &l.minted[i]; x.flags&fDead != 0 && x.flags&fDLQ == 0 {
			out = append(out, l.prefix+strconv.FormatUint(uint64(i), 36))
		}
	}
	for id, x := range l.foreign {
		if x.flags&fDead != 0 && x.flags&fDLQ == 0 {
			out = append(out, id)
		}
	}
	return out
}

// OnDeadLetterTopic returns those of ids that a consumer of the dead-letter
// topic has seen (DeadLetterObserver).
func (l *Ledger) OnDeadLetterTopic(ids []string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, id := range ids {
		if l.get(id).flags&fDLQ != 0 {
			out = append(out, id)
		}
	}
	return out
}

// Recovered reports whether a message first sent after the mark named
// mark was acked: the flow is back end to end (see Recovery).
func (l *Ledger) Recovered(mark string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.marks {
		if m.Mark == mark && m.Recovered {
			return true
		}
	}
	return false
}
