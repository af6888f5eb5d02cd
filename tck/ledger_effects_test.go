package tck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// Effects counted per message id: a settled message without an effect is
// lost, a message with two effects is a duplicate effect, and both fail
// Check; a suppressed duplicate delivery is counted, not failed.
func TestLedgerEffects(t *testing.T) {
	l := tck.NewLedger("fake", "effects")
	ms := msgs(4)
	if err := l.Send(context.Background(), &fakeSender{}, ms...); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		d := delivery(m, 0, "")
		received(l, d)
		settled(l, d, ports.Ack)
	}
	// A redelivery of ms[0] absorbed by the inbox.
	d := delivery(ms[0], 1, "")
	received(l, d)
	l.Suppressed(ms[0].ID())
	settled(l, d, ports.Ack)

	l.Effects(map[string]int{ms[0].ID(): 1, ms[1].ID(): 1, ms[2].ID(): 1, ms[3].ID(): 1})
	rec := &recorder{TB: t}
	r := l.Check(rec)
	if r.Lost != 0 || r.Effects.DupEffects != 0 || r.Effects.NoEffect != 0 || r.Effects.Suppressed != 1 || len(rec.errs) != 0 {
		t.Fatalf("one effect each: report %+v, errors %q", r, rec.errs)
	}
	if !strings.Contains(rec.logged[0], " effects=4 dup-effects=0 no-effect=0 suppressed=1 ") {
		t.Fatalf("LEDGER line %q", rec.logged[0])
	}

	l.Effects(map[string]int{ms[0].ID(): 2, ms[1].ID(): 1, ms[2].ID(): 1, "never-sent": 1})
	rec = &recorder{TB: t}
	r = l.Check(rec)
	if r.Lost != 1 || r.LostSample[0] != ms[3].ID() || r.Effects.NoEffect != 1 || r.Effects.DupEffects != 1 || r.Effects.DupEffectRows != 1 || r.Effects.PhantomEffects != 1 {
		t.Fatalf("a duplicate, a missing and a phantom effect: report %+v", r)
	}
	if got := l.LostIDs(); len(got) != 1 || got[0] != ms[3].ID() {
		t.Fatalf("LostIDs %v, want the message without an effect", got)
	}
	if !strings.Contains(rec.logged[0], " lost=1 ") || !strings.Contains(rec.logged[0], " dup-effects=1 no-effect=1 suppressed=1 phantom-effects=1 ") {
		t.Fatalf("LEDGER line %q", rec.logged[0])
	}
	if len(rec.errs) != 4 { // lost, no effect, duplicate effect, phantom effect
		t.Fatalf("Check errors %q, want four", rec.errs)
	}
}

// A consumer in another process reports its outcomes over a pipe.
func TestLedgerExternalOutcomes(t *testing.T) {
	l := tck.NewLedger("fake", "external")
	ms := msgs(3)
	if err := l.Send(context.Background(), &fakeSender{}, ms...); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		l.Delivered(m.ID(), "")
	}
	l.Unsettled(ms[0].ID())
	l.SettleFailed(ms[1].ID(), false)
	l.SettleFailed(ms[2].ID(), true)
	if c := l.Counts(); c.InFlight != 0 || c.SettleFailed != 2 || c.Deferred != 1 {
		t.Fatalf("counts %+v", c)
	}
	for _, m := range ms {
		l.Delivered(m.ID(), "")
		l.Settled(m.ID(), ports.Ack)
	}
	r := l.Report()
	if r.Lost != 0 || r.Windows[tck.WindowUnsettled].Count != 1 || r.Windows[tck.WindowSettleFailed].Count != 2 {
		t.Fatalf("report %+v", r)
	}
}

// A process killed after a message's effect committed may or may not
// have acked it: unsettled, it is lost only when it has no effect.
func TestLedgerDiedAfterEffect(t *testing.T) {
	l := tck.NewLedger("fake", "ack-unknown")
	ms := msgs(3)
	if err := l.Send(context.Background(), &fakeSender{}, ms...); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		l.Delivered(m.ID(), "")
	}
	l.DiedAfterEffect(ms[0].ID(), ms[1].ID())
	l.Died(ms[2].ID())
	if c := l.Counts(); c.AckUnknown != 2 || c.InFlight != 0 {
		t.Fatalf("counts %+v", c)
	}
	// ms[1] comes back after all (its ack had not landed) and is acked.
	l.Delivered(ms[1].ID(), "")
	l.Settled(ms[1].ID(), ports.Ack)
	l.Delivered(ms[2].ID(), "")
	l.Settled(ms[2].ID(), ports.Ack)
	if c := l.Counts(); c.AckUnknown != 1 || c.Settled != 2 {
		t.Fatalf("counts %+v", c)
	}
	if r := l.Report(); r.Lost != 1 {
		t.Fatalf("without effects an unsettled message is lost: %+v", r)
	}
	l.Effects(map[string]int{ms[0].ID(): 1, ms[1].ID(): 1, ms[2].ID(): 1})
	rec := &recorder{TB: t}
	r := l.Check(rec)
	if r.Lost != 0 || r.AckUnknownEffected != 1 || len(rec.errs) != 0 || len(l.LostIDs()) != 0 {
		t.Fatalf("report %+v, errors %q", r, rec.errs)
	}
	if !strings.Contains(rec.logged[0], " ack-unknown=1 ") {
		t.Fatalf("LEDGER line %q", rec.logged[0])
	}
	l.Effects(map[string]int{ms[1].ID(): 1, ms[2].ID(): 1})
	if r := l.Report(); r.Lost != 1 || r.AckUnknownEffected != 0 {
		t.Fatalf("an ack-unknown message without an effect is lost: %+v", r)
	}
}

// A position reported by another process (Delivered) and the same one
// observed in this process are one position: a redelivery of it from a
// killed process to a pipeline here is not "stored twice".
func TestLedgerExternalPositionMatchesObserved(t *testing.T) {
	l := tck.NewLedger("fake", "positions")
	l.SetPosition(func(d *ports.Delivery) string { return d.Facts.Get("pos") })
	ms := msgs(40)
	if err := l.Send(context.Background(), &fakeSender{}, ms...); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		pos := "p/0@" + strings.Repeat("1", i+1) // positions of both hash parities
		l.Delivered(m.ID(), pos)
		l.Settled(m.ID(), ports.Ack) // an ack that did not land
		d := delivery(m, 1, pos)
		received(l, d)
		settled(l, d, ports.Ack)
	}
	r := l.Report()
	if r.Windows[tck.WindowStoredTwice].Count != 0 || r.Windows[tck.WindowAfterSettle].Count != len(ms) {
		t.Fatalf("windows %+v, want every duplicate after-settle (same position)", r.Windows)
	}
}
