package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/operators/inbox"
	"github.com/sluicemq/sluice/ports"
)

// rig is a mem broker, a SQLite database with an inbox and an effects
// table, and a pipeline on topic "in" ending in inbox.Sink.
type rig struct {
	a       ports.Adapter
	db      *sql.DB
	ib      *inbox.Inbox
	p       *flow.Pipeline
	settled settlements
}

func newRig(t *testing.T, opts inbox.Options, fn func(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error) *rig {
	t.Helper()
	ctx := testCtx(t)
	r := &rig{a: memAdapter(t), db: openSQLite(t), settled: make(settlements, 64)}
	createEffects(t, r.db)
	var err error
	if r.ib, err = inbox.New(ctx, r.db, opts); err != nil {
		t.Fatal(err)
	}
	spec := ports.SubscriptionSpec{Topic: "in", Group: "g", QoS: ports.ExactlyOnce, Retry: ports.RetryPolicy{NoBackoff: true}}
	r.p = flow.New(r.a, spec, flow.WithObserver(r.settled.observe))
	inbox.Sink(r.p.Source(), r.ib, fn)
	if err := r.p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.p.Stop(context.Background()) })
	return r
}

// A message delivered twice (published twice with one id, as a producer
// retry after a lost confirm does) has one effect; the second delivery is
// acked without calling the handler.
func TestDuplicateDeliveryHasOneEffect(t *testing.T) {
	ctx := testCtx(t)
	var calls atomic.Int64
	r := newRig(t, inbox.Options{}, func(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error {
		calls.Add(1)
		return writeEffect(ctx, tx, d)
	})
	send(ctx, t, r.a, "in", "m-1", "a")
	send(ctx, t, r.a, "in", "m-1", "a")
	send(ctx, t, r.a, "in", "m-2", "b")
	for range 3 {
		if e := r.settled.next(ctx, t); e.Action != ports.Ack {
			t.Fatalf("delivery %s settled with %v (%v), want ACK", e.Delivery.ID, e.Action, e.Outcome.Err)
		}
	}
	if got := effectCounts(t, r.db); got["a"] != 1 || got["b"] != 1 || len(got) != 2 {
		t.Errorf("effects %v, want a and b once each", got)
	}
	if calls.Load() != 2 {
		t.Errorf("handler called %d times, want 2", calls.Load())
	}
	if s := r.ib.Stats(); s.Processed != 2 || s.Duplicates != 1 {
		t.Errorf("stats %+v, want 2 processed and 1 duplicate", s)
	}
	for _, id := range []string{"m-1", "m-2"} {
		if seen, err := r.ib.Seen(ctx, id); err != nil || !seen {
			t.Errorf("Seen(%s) = %v, %v; want true", id, seen, err)
		}
	}
}

// A handler error rolls back its writes and the inbox record: the
// delivery is requeued, and its redelivery is handled (one effect).
func TestHandlerErrorRollsBack(t *testing.T) {
	ctx := testCtx(t)
	var calls atomic.Int64
	var sawBefore atomic.Int64
	r := newRig(t, inbox.Options{}, func(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error {
		if calls.Add(1) == 1 {
			if err := writeEffect(ctx, tx, d); err != nil {
				return err
			}
			return errors.New("downstream unavailable")
		}
		// The redelivery: the first attempt left no effect behind.
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM effects`).Scan(&n); err != nil {
			return err
		}
		sawBefore.Store(n)
		return writeEffect(ctx, tx, d)
	})
	send(ctx, t, r.a, "in", "m-1", "a")
	if e := r.settled.next(ctx, t); e.Action != ports.Requeue {
		t.Fatalf("failing delivery settled with %v, want REQUEUE", e.Action)
	}
	if e := r.settled.next(ctx, t); e.Action != ports.Ack {
		t.Fatalf("redelivery settled with %v (%v), want ACK", e.Action, e.Outcome.Err)
	}
	if sawBefore.Load() != 0 {
		t.Errorf("the redelivery saw %d effect rows of the failed attempt; want 0 (rolled back)", sawBefore.Load())
	}
	if got := effectCounts(t, r.db); got["a"] != 1 {
		t.Errorf("effects %v, want a once", got)
	}
}

// A poison error rolls back and dead-letters; no record is left, so a
// replay of the dead letter is handled.
func TestPoisonDeadLettersWithoutRecord(t *testing.T) {
	ctx := testCtx(t)
	r := newRig(t, inbox.Options{}, func(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error {
		if err := writeEffect(ctx, tx, d); err != nil {
			return err
		}
		return ports.Poisonf("order %s is malformed", d.Payload)
	})
	send(ctx, t, r.a, "in", "m-1", "a")
	e := r.settled.next(ctx, t)
	if e.Action != ports.DeadLetter || !strings.Contains(e.Outcome.Err.Error(), "malformed") {
		t.Fatalf("poison delivery settled with %v (%v), want DEAD_LETTER with the reason", e.Action, e.Outcome.Err)
	}
	if seen, err := r.ib.Seen(ctx, "m-1"); err != nil || seen {
		t.Errorf("Seen = %v, %v after a poison rollback; want false", seen, err)
	}
	if got := effectCounts(t, r.db); len(got) != 0 {
		t.Errorf("effects %v after a rollback, want none", got)
	}
}

// A delivery without identity is dead-lettered with a reason that says
// what exactly-once needs, and never handled.
func TestNoIdentityIsPoison(t *testing.T) {
	ctx := testCtx(t)
	var calls atomic.Int64
	r := newRig(t, inbox.Options{}, func(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error {
		calls.Add(1)
		return writeEffect(ctx, tx, d)
	})
	if err := r.a.(interface {
		SendForeign(context.Context, ports.Topic, []byte, ports.Headers) error
	}).SendForeign(ctx, "in", []byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	e := r.settled.next(ctx, t)
	if e.Action != ports.DeadLetter || !errors.Is(e.Outcome.Err, inbox.ErrNoIdentity) || !ports.IsPoison(e.Outcome.Err) {
		t.Fatalf("delivery without identity settled with %v (%v), want DEAD_LETTER with ErrNoIdentity", e.Action, e.Outcome.Err)
	}
	if !strings.Contains(e.Outcome.Err.Error(), "producer id") {
		t.Errorf("reason %q does not say what to do", e.Outcome.Err)
	}
	if calls.Load() != 0 {
		t.Errorf("handler called %d times for a delivery without identity", calls.Load())
	}
	if s := r.ib.Stats(); s.WithoutIdentity != 1 {
		t.Errorf("stats %+v, want 1 without identity", s)
	}
}

// Options.WithoutIdentity AtLeastOnce handles such a delivery, with no
// record.
func TestNoIdentityAtLeastOnce(t *testing.T) {
	ctx := testCtx(t)
	r := newRig(t, inbox.Options{WithoutIdentity: inbox.AtLeastOnce}, writeEffect)
	if err := r.a.(interface {
		SendForeign(context.Context, ports.Topic, []byte, ports.Headers) error
	}).SendForeign(ctx, "in", []byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	if e := r.settled.next(ctx, t); e.Action != ports.Ack {
		t.Fatalf("settled with %v (%v), want ACK", e.Action, e.Outcome.Err)
	}
	if got := effectCounts(t, r.db); got["a"] != 1 {
		t.Errorf("effects %v, want a once", got)
	}
}

// A serialization failure runs the transaction again, inside the Sink.
func TestSerializationFailureIsRetried(t *testing.T) {
	ctx := testCtx(t)
	var calls atomic.Int64
	r := newRig(t, inbox.Options{}, func(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error {
		if calls.Add(1) == 1 {
			_ = writeEffect(ctx, tx, d)
			return sqlStateError("40001")
		}
		return writeEffect(ctx, tx, d)
	})
	send(ctx, t, r.a, "in", "m-1", "a")
	if e := r.settled.next(ctx, t); e.Action != ports.Ack {
		t.Fatalf("settled with %v (%v), want ACK after an inner retry", e.Action, e.Outcome.Err)
	}
	if got := effectCounts(t, r.db); got["a"] != 1 {
		t.Errorf("effects %v, want a once", got)
	}
	if s := r.ib.Stats(); s.Retries != 1 || s.Processed != 1 {
		t.Errorf("stats %+v, want 1 retry and 1 processed", s)
	}
}

type sqlStateError string

func (e sqlStateError) Error() string {
	return "could not serialize access (SQLSTATE " + string(e) + ")"
}
func (e sqlStateError) SQLState() string { return string(e) }

// An item that is not one delivery (a batch) fails the pipeline loudly,
// and nothing is handled or settled.
func TestBatchItemFailsThePipeline(t *testing.T) {
	ctx := testCtx(t)
	a := memAdapter(t)
	db := openSQLite(t)
	ib, err := inbox.New(ctx, db, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	p := flow.New(a, ports.SubscriptionSpec{Topic: "in", Group: "g", QoS: ports.ExactlyOnce})
	batches := operators.Batch(p.Source(), operators.BatchOptions{Size: 2, Window: 10 * time.Millisecond})
	inbox.Sink(batches, ib, func(context.Context, *sql.Tx, operators.Batched[*ports.Delivery]) error {
		calls.Add(1)
		return nil
	})
	runUntilNotOneDelivery(ctx, t, a, p)
	if calls.Load() != 0 {
		t.Errorf("handler called %d times for a batch", calls.Load())
	}
	if seen, _ := ib.Seen(ctx, "m-1"); seen {
		t.Error("a batch member was recorded")
	}
}

// runUntilNotOneDelivery runs p, sends it one message, and fails t
// unless p stops with ErrNotOneDelivery.
func runUntilNotOneDelivery(ctx context.Context, t *testing.T, a ports.Adapter, p *flow.Pipeline) {
	t.Helper()
	if err := ports.DeclareGroup(ctx, a, "in", "g"); err != nil {
		t.Fatal(err)
	}
	run := make(chan error, 1)
	go func() { run <- p.Run(ctx) }()
	send(ctx, t, a, "in", "m-1", "a")
	select {
	case err := <-run:
		if !errors.Is(err, inbox.ErrNotOneDelivery) {
			t.Fatalf("Run = %v, want ErrNotOneDelivery", err)
		}
	case <-ctx.Done():
		t.Fatal("the pipeline did not fail")
	}
}

// Start refuses ExactlyOnce for a pipeline ending in a plain flow.Sink,
// and accepts it for inbox.Sink.
func TestExactlyOnceNeedsTheInboxSink(t *testing.T) {
	ctx := testCtx(t)
	a := memAdapter(t)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "in", Group: "g", QoS: ports.ExactlyOnce})
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	err := p.Start(ctx)
	if !errors.Is(err, ports.ErrExactlyOnce) || !strings.Contains(err.Error(), "inbox.Sink") {
		p.Stop(ctx)
		t.Fatalf("Start = %v, want ErrExactlyOnce naming inbox.Sink", err)
	}
}

// A part of a Split that Start could not see (made by a Via) fails the
// pipeline too: the first part would record the delivery and the second
// would be taken for a redelivery.
func TestSplitPartFailsThePipeline(t *testing.T) {
	ctx := testCtx(t)
	a := memAdapter(t)
	ib, err := inbox.New(ctx, openSQLite(t), inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := flow.New(a, ports.SubscriptionSpec{Topic: "in", Group: "g", QoS: ports.ExactlyOnce})
	parts := flow.Via(p.Source(), func(it flow.Item[*ports.Delivery], emit flow.Emit[*ports.Delivery]) {
		for _, c := range it.Completion.Split(2) {
			emit(flow.Item[*ports.Delivery]{Ctx: it.Ctx, Value: it.Value, Msg: it.Msg, Completion: c})
		}
	})
	var calls atomic.Int64
	inbox.Sink(parts, ib, func(context.Context, *sql.Tx, *ports.Delivery) error {
		calls.Add(1)
		return nil
	})
	runUntilNotOneDelivery(ctx, t, a, p)
	if calls.Load() != 0 {
		t.Errorf("handler called %d times for parts", calls.Load())
	}
}
