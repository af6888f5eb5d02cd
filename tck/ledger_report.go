package tck

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// sampleSize bounds the ids a report lists.
const sampleSize = 10

// LedgerFileEnv names an environment variable: when set, Check appends
// every LEDGER line to that file as well (to build the failure matrix).
const LedgerFileEnv = "SLUICE_LEDGER_FILE"

// Counts is a snapshot of a ledger's running totals. Counts of messages
// are over unique ids; counts of deliveries and settlements are events.
type Counts struct {
	Attempted    int // messages whose send was attempted
	Confirmed    int // messages the broker confirmed
	Acked        int // messages acked at least once
	DeadLettered int // messages dead-lettered at least once
	Settled      int // confirmed messages acked or dead-lettered
	Deferred     int // messages not settled whose last settlement the adapter deferred (see SetDeferred)
	Phantoms     int // messages delivered that were never sent
	// AckUnknown counts messages not settled whose last delivery's
	// process died after the message's effect committed, maybe after its
	// ack reached the broker (see DiedAfterEffect).
	AckUnknown int
	// InDoubt counts messages not settled whose last settlement failed
	// with ports.ErrSettleInDoubt: the broker may have applied it.
	InDoubt int

	Delivered         int // deliveries
	Requeued          int // requeue settlements
	SettleFailed      int // settlements the adapter failed
	Duplicates        int // deliveries counted as duplicates
	DeadLetterArrived int // messages seen on a dead-letter topic
	InFlight          int // deliveries without an outcome yet
}

// Counts returns the running totals.
func (l *Ledger) Counts() Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.countsLocked()
}

func (l *Ledger) countsLocked() Counts {
	return Counts{
		Attempted: l.c.attempted, Confirmed: l.c.confirmed,
		Acked: l.c.acked, DeadLettered: l.c.dead, Settled: l.c.terminalConfirmed,
		Phantoms: l.c.phantom, Deferred: l.c.deferred, AckUnknown: l.c.ackUnknown, InDoubt: l.c.inDoubt,
		Delivered: l.c.deliveries, Requeued: l.c.requeues, SettleFailed: l.c.settleFailed,
		Duplicates: l.c.dups, DeadLetterArrived: l.c.dlqArrived,
		InFlight: len(l.open) + l.external,
	}
}

// notify wakes Await callers; l.mu must be held.
func (l *Ledger) notify() {
	if l.waiters > 0 && l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// Await blocks until cond holds on the ledger's counts or ctx is done; the
// error then names what and the last counts.
func (l *Ledger) Await(ctx context.Context, what string, cond func(Counts) bool) error {
	l.mu.Lock()
	for {
		c := l.countsLocked()
		if cond(c) {
			l.mu.Unlock()
			return nil
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.waiters++
		l.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		l.mu.Lock()
		l.waiters--
		if err != nil {
			c := l.countsLocked()
			l.mu.Unlock()
			return fmt.Errorf("ledger %s/%s: waiting for %s: %w (counts %+v)", l.adapter, l.fault, what, err, c)
		}
	}
}

// AwaitSettled waits until every confirmed message was acked or
// dead-lettered, or its settlement deferred by the adapter.
func (l *Ledger) AwaitSettled(ctx context.Context) error {
	return l.Await(ctx, "every confirmed message settled", func(c Counts) bool { return c.Settled+c.Deferred >= c.Confirmed })
}

// Footprint is an estimate of the memory the ledger's records take, in
// bytes (to tell it apart from what a soak measures).
func (l *Ledger) Footprint() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(cap(l.minted))*int64(unsafe.Sizeof(rec{})) + int64(len(l.foreign))*(int64(unsafe.Sizeof(rec{}))+64)
}

// Mark records a point in time (a fault injected or healed); the report
// gives, per mark, the time until a message first sent after it was acked
// and the time until every message confirmed before it was settled. Mark
// scans the ledger once.
func (l *Ledger) Mark(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := &Recovery{Mark: name, At: l.since(), attempts: l.c.attempted, pending: map[string]struct{}{}}
	for i := range l.minted {
		if x := &l.minted[i]; x.flags&fConfirmed != 0 && x.flags&(fAcked|fDead) == 0 {
			m.pending[l.prefix+strconv.FormatUint(uint64(i), 36)] = struct{}{}
		}
	}
	for id, x := range l.foreign {
		if x.flags&fConfirmed != 0 && x.flags&(fAcked|fDead) == 0 {
			m.pending[id] = struct{}{}
		}
	}
	if len(m.pending) == 0 {
		m.Drained = true
	}
	l.marks = append(l.marks, m)
}

// Report is what the ledger concluded.
type Report struct {
	Adapter, Fault string
	Counts
	// Lost is the number of confirmed messages never acked nor
	// dead-lettered; LostSample lists some of them.
	Lost       int
	LostSample []string
	// LostAfterSettleError counts the lost messages whose last delivery's
	// settlement failed and that never came back: the adapter reported a
	// failure but the broker did not redeliver them (the adapter settled
	// them after all, behind the core's back, or they are gone).
	LostAfterSettleError int
	// LostUndelivered counts the lost messages that were never delivered
	// at all: the broker dropped them (or still holds them).
	LostUndelivered int
	// DeferredUnsettled counts confirmed messages never acked nor
	// dead-lettered whose last settlement the adapter deferred: not
	// counted as lost, on the adapter's word (see Ledger.SetDeferred).
	DeferredUnsettled int
	// InDoubt counts confirmed messages never seen acked nor dead-lettered
	// whose last settlement failed in doubt (ports.ErrSettleInDoubt): the
	// broker applied it, since it never redelivered them. Not lost: their
	// handler finished, and only the broker's answer was lost.
	InDoubt int
	// AckUnknownEffected counts confirmed messages never seen settled
	// whose process died after their effect committed (DiedAfterEffect)
	// and that have their effect (Effects): not lost — the ack may have
	// reached the broker before the process died, which then never
	// redelivers them. Without Effects they count as lost.
	AckUnknownEffected int
	// Unconfirmed messages were attempted and never confirmed;
	// UnconfirmedDelivered of them were delivered all the same (stored
	// without a confirm reaching the sender).
	Unconfirmed, UnconfirmedDelivered int
	// RepeatedEffects counts messages settled terminally more than once
	// (acked twice, or acked and dead-lettered): the duplicates an
	// idempotent consumer must absorb.
	RepeatedEffects int
	PhantomSample   []string
	// Effects is what the effects counted by Effects showed (zero when
	// they were not counted). Its NoEffect messages are in Lost too.
	Effects      EffectReport
	PeakInFlight int
	Windows      map[Window]WindowStat
	Recoveries   []Recovery
	Elapsed      time.Duration
}

// Report computes the ledger's conclusion. It scans every message.
func (l *Ledger) Report() Report {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := Report{Adapter: l.adapter, Fault: l.fault, Counts: l.countsLocked(), PeakInFlight: l.peak, Elapsed: l.since()}
	scan := func(x *rec, id func() string) {
		if x.flags&fConfirmed != 0 && x.flags&(fAcked|fDead) == 0 && x.fate == fateDeferred {
			r.DeferredUnsettled++
		} else if x.flags&fConfirmed != 0 && x.flags&(fAcked|fDead) == 0 && x.fate == fateInDoubt {
			r.InDoubt++
		} else if l.effectsSet && x.flags&fConfirmed != 0 && x.flags&(fAcked|fDead) == 0 && x.fate == fateAckUnknown && l.effects[id()] > 0 {
			r.AckUnknownEffected++
		} else if x.flags&fConfirmed != 0 && x.flags&(fAcked|fDead) == 0 {
			r.Lost++
			if x.fate == fateSettleFailed {
				r.LostAfterSettleError++
			}
			if x.deliveries == 0 {
				r.LostUndelivered++
			}
			if len(r.LostSample) < sampleSize {
				r.LostSample = append(r.LostSample, id())
			}
		} else if l.effectsSet && x.flags&fConfirmed != 0 && l.effects[id()] == 0 {
			r.Lost++ // settled, and yet its effect is missing
			if len(r.LostSample) < sampleSize {
				r.LostSample = append(r.LostSample, id())
			}
		}
		if x.flags&fAttempted != 0 && x.flags&fConfirmed == 0 {
			r.Unconfirmed++
			if x.deliveries > 0 {
				r.UnconfirmedDelivered++
			}
		}
		if int(x.acks)+int(x.deads) > 1 {
			r.RepeatedEffects++
		}
	}
	for i := range l.minted {
		scan(&l.minted[i], func() string { return l.prefix + strconv.FormatUint(uint64(i), 36) })
	}
	for id, x := range l.foreign {
		scan(x, func() string { return id })
	}
	r.PhantomSample = slices.Clone(l.phantoms)
	r.Effects = l.effectReportLocked()
	r.Windows = make(map[Window]WindowStat, len(l.windows))
	for w, s := range l.windows {
		r.Windows[w] = *s
	}
	for _, m := range l.marks {
		c := *m
		c.pending = nil
		r.Recoveries = append(r.Recoveries, c)
	}
	return r
}

// Line is the report's LEDGER line:
//
//	LEDGER <adapter> <fault> published=… acked=… dead=… lost=… dup=… …
//
// published counts confirmed messages; windows lists the duplicates per
// window; recovery lists, per mark, the time to the first ack of a message
// sent after it and the time until every message confirmed before it was
// settled ("none" when that did not happen).
func (r Report) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "LEDGER %s %s published=%d acked=%d dead=%d lost=%d dup=%d", r.Adapter, r.Fault,
		r.Confirmed, r.Acked, r.DeadLettered, r.Lost, r.Duplicates)
	if r.LostAfterSettleError > 0 {
		fmt.Fprintf(&b, " lost-after-settle-error=%d", r.LostAfterSettleError)
	}
	if r.LostUndelivered > 0 {
		fmt.Fprintf(&b, " lost-undelivered=%d", r.LostUndelivered)
	}
	if r.DeferredUnsettled > 0 {
		fmt.Fprintf(&b, " deferred=%d", r.DeferredUnsettled)
	}
	if r.InDoubt > 0 {
		fmt.Fprintf(&b, " settle-in-doubt=%d", r.InDoubt)
	}
	if r.AckUnknownEffected > 0 {
		fmt.Fprintf(&b, " ack-unknown=%d", r.AckUnknownEffected)
	}
	if e := r.Effects; e.Counted {
		fmt.Fprintf(&b, " effects=%d dup-effects=%d no-effect=%d suppressed=%d", e.Distinct, e.DupEffects, e.NoEffect, e.Suppressed)
		if e.PhantomEffects > 0 {
			fmt.Fprintf(&b, " phantom-effects=%d", e.PhantomEffects)
		}
	}
	fmt.Fprintf(&b, " attempted=%d unconfirmed=%d unconfirmed-delivered=%d delivered=%d requeued=%d settle-failed=%d repeated-effects=%d peak-inflight=%d",
		r.Attempted, r.Unconfirmed, r.UnconfirmedDelivered, r.Delivered, r.Requeued, r.SettleFailed, r.RepeatedEffects, r.PeakInFlight)
	b.WriteString(" windows=")
	if len(r.Windows) == 0 {
		b.WriteString("-")
	}
	ws := make([]Window, 0, len(r.Windows))
	for w := range r.Windows {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	for i, w := range ws {
		if i > 0 {
			b.WriteByte(',')
		}
		s := r.Windows[w]
		fmt.Fprintf(&b, "%s:%d@%v-%v", w, s.Count, s.First.Round(time.Millisecond), s.Last.Round(time.Millisecond))
	}
	b.WriteString(" recovery=")
	if len(r.Recoveries) == 0 {
		b.WriteString("-")
	}
	for i, m := range r.Recoveries {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=ack:%s/drain:%s", m.Mark, dur(m.After, m.Recovered), dur(m.Drain, m.Drained))
	}
	fmt.Fprintf(&b, " elapsed=%v", r.Elapsed.Round(time.Millisecond))
	return b.String()
}

// Check reports the ledger: it logs the LEDGER line (and appends it to the
// file named by SLUICE_LEDGER_FILE, when set) and fails t if a confirmed
// message was lost or a message nobody sent was delivered.
func (l *Ledger) Check(t testing.TB) Report {
	t.Helper()
	r := l.Record(t)
	if r.Lost > 0 {
		how := "never acked nor dead-lettered"
		if r.Effects.Counted {
			how += ", or without an effect"
		}
		t.Errorf("ledger %s/%s: %d confirmed message(s) LOST (%s), e.g. %v", r.Adapter, r.Fault, r.Lost, how, r.LostSample)
		if r.LostAfterSettleError > 0 {
			t.Errorf("ledger %s/%s: %d of them had a failed settlement and were never redelivered: the adapter settled them "+
				"after reporting a failure, or the broker lost them; either breaks the Settle contract", r.Adapter, r.Fault, r.LostAfterSettleError)
		}
	}
	if e := r.Effects; e.NoEffect > 0 {
		t.Errorf("ledger %s/%s: %d confirmed message(s) have no effect, e.g. %v", r.Adapter, r.Fault, e.NoEffect, e.NoEffectSample)
	}
	if e := r.Effects; e.DupEffects > 0 {
		t.Errorf("ledger %s/%s: %d message(s) have more than one effect (%d extra), e.g. %v", r.Adapter, r.Fault, e.DupEffects, e.DupEffectRows, e.DupEffectSample)
	}
	if e := r.Effects; e.PhantomEffects > 0 {
		t.Errorf("ledger %s/%s: %d effect(s) of messages that were never sent", r.Adapter, r.Fault, e.PhantomEffects)
	}
	if r.Phantoms > 0 {
		t.Errorf("ledger %s/%s: %d message(s) delivered that were never sent, e.g. %v", r.Adapter, r.Fault, r.Phantoms, r.PhantomSample)
	}
	return r
}

// Record logs the ledger's LEDGER line (and appends it to the file named
// by SLUICE_LEDGER_FILE, when set) without asserting anything: for a test
// that already ended as a skip naming a known bug.
func (l *Ledger) Record(t testing.TB) Report {
	t.Helper()
	r := l.Report()
	line := r.Line()
	t.Log(line)
	if path := os.Getenv(LedgerFileEnv); path != "" {
		if err := appendLine(path, line); err != nil {
			t.Errorf("writing %s: %v", LedgerFileEnv, err)
		}
	}
	return r
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func dur(d time.Duration, ok bool) string {
	if !ok {
		return "none"
	}
	return d.Round(time.Millisecond).String()
}
