package tck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/deadletter"
	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(32, "DeadLetterRedrive", always, caseDeadLetterRedrive)
	register(33, "DeadLetterRedriveCrash", always, caseDeadLetterRedriveCrash)
}

const redriveBatch = 4

// testLog writes the area's audit and alert records to the test log.
type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// deadLetterArea declares the kit topic's dead-letter area (its group and
// retention, and the audit topic) before anything is dead-lettered, as an
// application does with its topology.
func (k *kit) deadLetterArea(a ports.Adapter) *deadletter.Area {
	k.t.Helper()
	idle := max(2*k.opts.Quiet, time.Second)
	area, err := deadletter.New(a, k.topic, k.group+"-dlq", deadletter.Options{
		Batch: redriveBatch, Idle: idle, FirstWait: k.opts.Timeout / 2,
		Logger: slog.New(slog.NewTextHandler(testLog{k.t}, nil)),
	})
	if err != nil {
		k.t.Fatal(err)
	}
	d, err := area.Declare(k.ctx, deadletter.Retention{})
	if err != nil {
		k.t.Fatalf("declaring the dead-letter area: %v", err)
	}
	if len(d.NotEnforced) > 0 {
		k.t.Logf("adapter %q does not enforce on dead letters: %v", k.name, d.NotEnforced)
	}
	return area
}

// poisonThenFix dead-letters n messages with a failing handler and
// returns their ids, the consumer, and the switch that fixes the handler.
func (k *kit) poisonThenFix(n int) ([]string, *consumer, *atomic.Bool) {
	k.t.Helper()
	fixed := new(atomic.Bool)
	c := k.consume(k.first, k.spec(), func(_ context.Context, d *ports.Delivery) error {
		if !fixed.Load() {
			return ports.Poisonf("handler cannot read %s yet", d.ID)
		}
		return nil
	})
	sent := k.send(k.first, n)
	c.collect(n, "the poison messages")
	c.waitStats(fmt.Sprintf("%d dead letters", n), func(s flow.Stats) bool { return s.DeadLettered == int64(n) })
	return sent, c, fixed
}

// expectEmpty fails unless a full pass finds the area empty.
func (k *kit) expectEmpty(area *deadletter.Area) {
	k.t.Helper()
	left, pass, err := area.List(k.ctx, deadletter.Filter{})
	if err != nil {
		k.t.Fatalf("listing the dead-letter area: %v", err)
	}
	if len(left) != 0 {
		k.t.Fatalf("the dead-letter area still holds %d messages after the redrive (pass ended %s), first %+v", len(left), pass.End, left[0])
	}
}

// auditRecords reads want records from the area's audit topic, then
// expects no more.
func (k *kit) auditRecords(area *deadletter.Area, want int) []deadletter.Record {
	k.t.Helper()
	sp := k.spec()
	sp.Topic, sp.Group = area.AuditTopic(), deadletter.AuditGroup
	if k.caps.StartEarliest {
		sp.Start = ports.StartEarliest
	}
	c := k.consume(k.first, sp, nil)
	var out []deadletter.Record
	for _, r := range c.collect(want, "the audit records") {
		rec, err := deadletter.ParseRecord(r.d.Payload)
		if err != nil {
			k.t.Fatalf("audit topic holds %q: %v", r.d.Payload, err)
		}
		out = append(out, rec)
	}
	c.quiet(fmt.Sprintf("the audit topic must hold %d record(s)", want))
	return out
}

// 32. dead-letter 10 poison messages, fix the handler, redrive them: each
// is handled once, the audit topic holds one record, the area is empty.
func caseDeadLetterRedrive(k *kit) {
	const n = 10
	area := k.deadLetterArea(k.first)
	sent, c, fixed := k.poisonThenFix(n)
	fixed.Store(true)

	res, err := area.Redrive(k.ctx, deadletter.Request{Operator: "tck", Note: "handler fixed"})
	if err != nil {
		k.t.Fatalf("redrive: %v (result %+v)", err, res)
	}
	if res.Done != n || len(res.Selected) != n || res.Failed != 0 || len(res.Missing) != 0 {
		k.t.Fatalf("redrive result %+v, want %d redriven", res, n)
	}
	seen := map[string]int{}
	for _, r := range c.collect(n, "the redriven messages") {
		seen[r.d.ID]++
		if got := r.d.Headers.Get(deadletter.HeaderRedriveAudit); got != res.AuditID {
			k.t.Fatalf("redriven %s carries audit id %q, want %q", r.d.ID, got, res.AuditID)
		}
		if got := r.d.Headers.Get(deadletter.HeaderRedriveCount); got != "1" {
			k.t.Fatalf("redriven %s carries redrive count %q, want 1", r.d.ID, got)
		}
	}
	c.quiet("each redriven message must be handled once")
	for _, id := range sent {
		if seen[id] != 1 {
			k.t.Fatalf("message %s handled %d times after the redrive, want once (seen %v)", id, seen[id], seen)
		}
	}
	c.waitStats("the redriven messages acked", func(s flow.Stats) bool { return s.Acked == n })

	recs := k.auditRecords(area, 1)
	rec := recs[0]
	got := append([]string(nil), rec.IDs...)
	want := append([]string(nil), sent...)
	sort.Strings(got)
	sort.Strings(want)
	if rec.ID != res.AuditID || rec.Action != deadletter.ActionRedrive || rec.Operator != "tck" || rec.Note != "handler fixed" ||
		rec.Count != n || fmt.Sprint(got) != fmt.Sprint(want) || rec.At.IsZero() {
		k.t.Fatalf("audit record %+v does not describe the redrive %s of %v", rec, res.AuditID, want)
	}
	k.expectEmpty(area)
}

// 33. a redrive abandoned after its first batch was confirmed and before
// that batch's dead letters were settled (what a crash does) loses
// nothing: a second redrive finishes, every message is handled, and the
// duplicates are at most one batch.
func caseDeadLetterRedriveCrash(k *kit) {
	const n = 10
	area := k.deadLetterArea(k.first)
	sent, c, fixed := k.poisonThenFix(n)
	fixed.Store(true)

	ctx, crash := context.WithCancel(k.ctx)
	defer crash()
	confirmed := 0
	_, err := area.Redrive(ctx, deadletter.Request{Operator: "tck", Note: "crash midway", Progress: func(p deadletter.Progress) {
		confirmed = p.Sent
		if p.Sent > 0 {
			crash()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		k.t.Fatalf("the abandoned redrive returned %v, want context.Canceled", err)
	}
	if confirmed == 0 || confirmed > redriveBatch {
		k.t.Fatalf("abandoned after %d confirmed copies, want 1..%d (one batch)", confirmed, redriveBatch)
	}
	res, err := area.Redrive(k.ctx, deadletter.Request{Operator: "tck", Note: "resume after crash"})
	if err != nil {
		k.t.Fatalf("second redrive: %v (result %+v)", err, res)
	}
	seen := map[string]int{}
	total := confirmed + res.Done
	for _, r := range c.collect(total, "the redriven messages of both runs") {
		seen[r.d.ID]++
	}
	c.quiet("no more than what both runs sent")
	for _, id := range sent {
		if seen[id] == 0 {
			k.t.Fatalf("message %s was lost by the crashed redrive (handled %v)", id, seen)
		}
	}
	if dup := total - n; dup > redriveBatch {
		k.t.Fatalf("%d duplicates after a crash, want at most one batch (%d)", dup, redriveBatch)
	}
	k.t.Logf("crashed after %d confirmed copies; second run redrove %d; %d duplicate(s)", confirmed, res.Done, total-n)
	k.auditRecords(area, 2)
	k.expectEmpty(area)
}
