package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// DefaultTable is the inbox table's name when Options.Table is empty.
const DefaultTable = "sluice_inbox"

// DefaultRetries is how many times Sink tries a transaction again after a
// serialization failure when Options.Retries is zero.
const DefaultRetries = 5

// WithoutIdentity says what Sink does with a delivery that has no
// identity (ports.Delivery.HasIdentity is false).
type WithoutIdentity int

const (
	// DeadLetter (default): the delivery is poison, dead-lettered with a
	// reason that says exactly-once needs an identity. Nothing can tell
	// its redelivery from a new message, so it is neither handled at
	// least once silently nor dropped.
	DeadLetter WithoutIdentity = iota
	// AtLeastOnce: the handler runs in a transaction with no inbox
	// record, so a redelivery runs it again. The first such delivery is
	// logged at Warn level.
	AtLeastOnce
)

// Options configure an Inbox. The zero value is usable.
type Options struct {
	// Table is the inbox table: id TEXT PRIMARY KEY, topic TEXT,
	// processed_at timestamp, created by New when missing. A name of
	// letters, digits and underscores, optionally schema-qualified
	// ("billing.inbox"). Default DefaultTable.
	Table string
	// Dialect is the database's SQL dialect. Default: detected from the
	// driver of the *sql.DB (New fails for a driver it does not know).
	Dialect Dialect
	// WithoutIdentity chooses what happens to a delivery without an
	// identity. Default DeadLetter.
	WithoutIdentity WithoutIdentity
	// Isolation is the isolation level of Sink's transactions. Default
	// sql.LevelDefault (the database's: READ COMMITTED on PostgreSQL,
	// which is enough: the primary key decides between two deliveries of
	// one message).
	Isolation sql.IsolationLevel
	// Retries bounds how many times a transaction that failed by a
	// serialization failure or deadlock (PostgreSQL 40001, 40P01) or
	// SQLite busy is run again, handler included, before the item fails
	// (and is requeued). Default DefaultRetries; negative: never.
	Retries int
	// Logger receives a Debug line per suppressed duplicate and the Warn
	// line of the first delivery without identity handled AtLeastOnce.
	// Default slog.Default().
	Logger *slog.Logger
	// AfterCommit, when set, is called with the item's context after a
	// delivery's transaction committed and before its item succeeds (so
	// before the ack): for metrics, and for tests that crash a consumer
	// at that moment. It holds up the Sink while it runs.
	AfterCommit func(ctx context.Context, d *ports.Delivery)
	// Clock returns processed_at. Default time.Now.
	Clock func() time.Time
}

var tableName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*\.)?[A-Za-z_][A-Za-z0-9_]*$`)

// Inbox is the record of handled deliveries in one database. It is safe
// for concurrent use by several sinks and processes: the table's primary
// key decides which delivery of a message commits its effect.
type Inbox struct {
	db      *sql.DB
	dialect Dialect
	table   string
	sql     statements
	opts    Options
	tx      sql.TxOptions

	stats    counters
	warnOnce sync.Once
}

type counters struct {
	processed, duplicates, withoutIdentity, retries atomic.Uint64
}

// Stats counts what an Inbox's sinks did.
type Stats struct {
	// Processed: deliveries whose effect and record committed.
	Processed uint64
	// Duplicates: deliveries found already recorded and acked without a
	// second effect.
	Duplicates uint64
	// WithoutIdentity: deliveries without identity (dead-lettered, or
	// handled at least once).
	WithoutIdentity uint64
	// Retries: transactions run again after a serialization failure.
	Retries uint64
}

// New returns the inbox of db, creating its table (and an index on
// processed_at) when missing. ctx bounds the creation.
func New(ctx context.Context, db *sql.DB, opts Options) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("inbox: New with a nil *sql.DB: %w", ports.ErrInvalid)
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if !tableName.MatchString(opts.Table) {
		return nil, fmt.Errorf("inbox: Options.Table %q: want letters, digits and underscores, optionally schema.table: %w", opts.Table, ports.ErrInvalid)
	}
	if opts.WithoutIdentity != DeadLetter && opts.WithoutIdentity != AtLeastOnce {
		return nil, fmt.Errorf("inbox: unknown Options.WithoutIdentity %d: %w", int(opts.WithoutIdentity), ports.ErrInvalid)
	}
	if opts.Retries == 0 {
		opts.Retries = DefaultRetries
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Dialect == "" {
		d, err := detect(db)
		if err != nil {
			return nil, err
		}
		opts.Dialect = d
	}
	st, err := opts.Dialect.statements(opts.Table)
	if err != nil {
		return nil, err
	}
	if err := create(ctx, db, st, opts.Table); err != nil {
		return nil, fmt.Errorf("inbox: create table %s: %w", opts.Table, err)
	}
	return &Inbox{db: db, dialect: opts.Dialect, table: opts.Table, sql: st, opts: opts, tx: sql.TxOptions{Isolation: opts.Isolation}}, nil
}

// create runs st's creation statements in one transaction, under st's
// lock where the dialect needs one.
func create(ctx context.Context, db *sql.DB, st statements, table string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if st.lock != "" {
		if _, err := tx.ExecContext(ctx, st.lock, table); err != nil {
			return err
		}
	}
	for _, q := range st.create {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Table returns the inbox table's name.
func (ib *Inbox) Table() string { return ib.table }

// Dialect returns the inbox's SQL dialect.
func (ib *Inbox) Dialect() Dialect { return ib.dialect }

// Seen reports whether a delivery with identity id has committed its
// effect through this inbox (and was not purged since).
func (ib *Inbox) Seen(ctx context.Context, id string) (bool, error) {
	var one int
	err := ib.db.QueryRowContext(ctx, ib.sql.seen, id).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("inbox: seen %q: %w", id, err)
	}
	return true, nil
}

// Purge deletes the records processed before now minus olderThan and
// returns how many it deleted.
//
// Retention: a message delivered again after its record was purged is
// handled again. Keep records longer than any delivery of a message can
// come after its first: the broker's redelivery and retention window, a
// requeue's delay, a consumer that was down, a replay from a dead-letter
// queue of a message that had been handled (a copy that was
// dead-lettered never committed, so its replay is handled once). Days,
// not minutes; run Purge from a timer.
func (ib *Inbox) Purge(ctx context.Context, olderThan time.Duration) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("inbox: Purge with a negative age %v: %w", olderThan, ports.ErrInvalid)
	}
	res, err := ib.db.ExecContext(ctx, ib.sql.purge, ib.dialect.timeArg(ib.opts.Clock().Add(-olderThan)))
	if err != nil {
		return 0, fmt.Errorf("inbox: purge %s: %w", ib.table, err)
	}
	return res.RowsAffected()
}

// Stats returns the counts of the inbox's sinks so far.
func (ib *Inbox) Stats() Stats {
	return Stats{
		Processed:       ib.stats.processed.Load(),
		Duplicates:      ib.stats.duplicates.Load(),
		WithoutIdentity: ib.stats.withoutIdentity.Load(),
		Retries:         ib.stats.retries.Load(),
	}
}
