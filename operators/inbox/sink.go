package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// ErrNoIdentity is the reason a delivery without identity is dead-lettered
// by Sink (wrapped in a *ports.PoisonError).
var ErrNoIdentity = errors.New("inbox: exactly-once needs the delivery's identity, and this delivery has none: publish it with a producer id (ports.HeaderID; sluice producers set one) or through a broker that assigns one, or set inbox.Options.WithoutIdentity to AtLeastOnce")

// ErrNotOneDelivery is the fatal error of a pipeline whose inbox Sink got
// an item that is not exactly one delivery.
var ErrNotOneDelivery = errors.New("inbox: Sink got an item that is not exactly one delivery (a batch, a Join, or a part of a FlatMap or Split): an exactly-once Sink records each delivery once, so give it one item per delivery and batch or fan out inside its function")

// Sink is the terminal stage of an exactly-once pipeline: for each item
// it begins a transaction on ib's database, records the delivery's
// identity, runs fn with the transaction, and commits both together;
// the item succeeds (and its delivery is acked) after the commit.
//
// Per item:
//
//   - identity already recorded (a redelivery of a handled message): the
//     transaction commits with no effect, fn is not called, and the item
//     succeeds (ACK); a Debug line is logged and Stats.Duplicates counts it;
//   - fn returns nil: COMMIT, then the item succeeds (ACK);
//   - fn returns an error: ROLLBACK (no record, no effect), and the item
//     fails with it as flow.Sink's would: poison dead-letters, another
//     error requeues, a cancellation of ctx settles nothing;
//   - the commit fails: the item fails and is requeued; its redelivery is
//     acked without effect if the commit had in fact happened;
//   - a serialization failure or deadlock runs the transaction again, fn
//     included, up to Options.Retries times;
//   - no identity: the item is poison with ErrNoIdentity as the reason
//     (Options.WithoutIdentity can choose at-least-once handling instead);
//   - not exactly one delivery (a batch, a Join, a part of a Split): the
//     item is cancelled and the pipeline fails with ErrNotOneDelivery.
//
// fn must make its effect only through tx (see the package's Limits), and
// may run more than once for one message when a transaction is rolled
// back. Workers(n) runs n transactions at once. The Sink declares
// flow.ExactlyOnceEffect, so the pipeline may ask for ports.ExactlyOnce.
func Sink[T any](in flow.Stream[T], ib *Inbox, fn func(ctx context.Context, tx *sql.Tx, v T) error, opts ...flow.StageOption) {
	if ib == nil || fn == nil {
		out := flow.Invalid[T, struct{}](in, fmt.Errorf("inbox: Sink with a nil Inbox or function: %w", ports.ErrInvalid))
		flow.Sink(out, func(context.Context, struct{}) error { return nil }, flow.ExactlyOnceEffect())
		return
	}
	// The items that are not one delivery go on to a stage that fails the
	// pipeline; the others are completed here.
	bad := flow.Via(in, func(it flow.Item[T], emit flow.Emit[T]) {
		if it.Msg == nil || it.Completion.Part() {
			emit(it)
			return
		}
		_ = it.Settle(ib.handle(it.Ctx, it.Msg, func(ctx context.Context, tx *sql.Tx) error {
			return fn(ctx, tx, it.Value)
		}))
	}, opts...)
	none := flow.Operate(bad, func(_ context.Context, src <-chan flow.Item[T], _ chan<- flow.Item[struct{}]) error {
		for it := range src {
			_ = it.Completion.Cancel(ErrNotOneDelivery)
			return ErrNotOneDelivery // Operate cancels the rest
		}
		return nil
	})
	flow.Sink(none, func(context.Context, struct{}) error { return nil }, flow.ExactlyOnceEffect())
}

// handle runs one delivery's transaction, with the identity policy, and
// returns the item's result.
func (ib *Inbox) handle(ctx context.Context, d *ports.Delivery, fn func(context.Context, *sql.Tx) error) error {
	record := d.HasIdentity()
	if !record {
		ib.stats.withoutIdentity.Add(1)
		if ib.opts.WithoutIdentity == DeadLetter {
			return &ports.PoisonError{Err: ErrNoIdentity}
		}
		ib.warnOnce.Do(func() {
			ib.opts.Logger.Warn("sluice: inbox: a delivery without identity is handled at least once (Options.WithoutIdentity is AtLeastOnce): its redelivery would run the handler again", "topic", string(d.Topic), "table", ib.table)
		})
	}
	for attempt := 0; ; attempt++ {
		dup, err := ib.transact(ctx, d, record, fn)
		if err != nil && retryable(err) && attempt < ib.opts.Retries && ctx.Err() == nil {
			ib.stats.retries.Add(1)
			continue
		}
		switch {
		case err != nil:
			return err
		case dup:
			ib.stats.duplicates.Add(1)
			ib.opts.Logger.Debug("sluice: inbox: duplicate suppressed: the delivery's identity is already recorded; acked without effect", "id", d.ID, "topic", string(d.Topic), "redeliveries", d.RedeliveryCount, "table", ib.table)
			return nil
		}
		if record {
			ib.stats.processed.Add(1)
		}
		if ib.opts.AfterCommit != nil {
			ib.opts.AfterCommit(ctx, d)
		}
		return nil
	}
}

// transact is one attempt: BEGIN, record d (when record), fn, COMMIT. It
// reports dup when d's identity was recorded already (nothing else done).
// fn's error is returned as it is, so that it classifies the item.
func (ib *Inbox) transact(ctx context.Context, d *ports.Delivery, record bool, fn func(context.Context, *sql.Tx) error) (dup bool, err error) {
	tx, err := ib.db.BeginTx(ctx, &ib.tx)
	if err != nil {
		return false, fmt.Errorf("inbox: begin: %w", err)
	}
	done := false
	defer func() {
		if !done { // an error or a panic in fn
			_ = tx.Rollback()
		}
	}()
	if record {
		res, err := tx.ExecContext(ctx, ib.sql.insert, d.ID, string(d.Topic), ib.dialect.timeArg(ib.opts.Clock()))
		if err != nil {
			return false, fmt.Errorf("inbox: record %q in %s: %w", d.ID, ib.table, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return false, fmt.Errorf("inbox: record %q in %s: %w", d.ID, ib.table, err)
		}
		dup = n == 0
	}
	if !dup {
		if err := fn(ctx, tx); err != nil {
			return false, err
		}
	}
	done = true
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("inbox: commit %q: %w", d.ID, err)
	}
	return dup, nil
}
