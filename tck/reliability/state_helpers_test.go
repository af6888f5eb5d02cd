package reliability_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait of these tests (2 minutes: beside a CPU hog the
// SQLite consumers settle 60 messages/s).
const wait = 2 * time.Minute

// schema is the business database of the tests: processed is the
// idempotency record (one row per message id), the other tables are the
// business state.
const schema = `
CREATE TABLE processed (message_id TEXT PRIMARY KEY, owner_epoch INTEGER NOT NULL DEFAULT 0);
CREATE TABLE accounts (account TEXT PRIMARY KEY, balance INTEGER NOT NULL);
CREATE TABLE writes (message_id TEXT NOT NULL, account TEXT NOT NULL);
CREATE TABLE state (key TEXT PRIMARY KEY, version INTEGER NOT NULL, value TEXT NOT NULL);
CREATE TABLE audit (key TEXT NOT NULL, old_version INTEGER NOT NULL, new_version INTEGER NOT NULL);
CREATE TRIGGER state_audit AFTER UPDATE ON state BEGIN
	INSERT INTO audit(key, old_version, new_version) VALUES (old.key, old.version, new.version);
END;
CREATE TABLE owners (queue TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
`

// openDB opens a fresh SQLite database in a temporary directory with at
// most maxConns connections: the consumer's connection budget.
func openDB(t *testing.T, maxConns int) *sql.DB {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "state.db") +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(schema); err != nil {
		t.Fatalf("schema: %v", err)
	}
	return db
}

// applyOnce runs write in one transaction with the idempotency record of
// id: the first delivery of a message id commits both, every later one
// commits nothing and reports applied=false. The consumer acks only after
// it returned (the pipeline settles from the handler's result), so a crash
// in between redelivers a message whose effect is already committed — and
// applyOnce absorbs it.
func applyOnce(ctx context.Context, db *sql.DB, id string, write func(*sql.Tx) error) (applied bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if !applied || err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, `INSERT INTO processed(message_id) VALUES (?) ON CONFLICT DO NOTHING`, id)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if err := write(tx); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	return true, nil
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// world is one in-process broker, a ledger and helpers to send and
// consume through it.
type world struct {
	t      *testing.T
	b      *mem.Broker
	l      *tck.Ledger
	ctx    context.Context
	topic  ports.Topic
	errs   chan error
	closed []func()
}

func newWorld(t *testing.T, fault string) *world {
	t.Helper()
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	w := &world{t: t, b: b, l: tck.NewLedger("mem+sqlite", fault), ctx: ctx, topic: ports.Topic("state." + fault), errs: make(chan error, 1024)}
	t.Cleanup(func() {
		cancel()
		_ = b.Close(context.Background())
		w.l.Check(t)
	})
	return w
}

func (w *world) adapter() *mem.Adapter {
	w.t.Helper()
	a, err := mem.New(w.b)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

func (w *world) spec(group string) ports.SubscriptionSpec {
	return ports.SubscriptionSpec{Topic: w.topic, Group: group, InFlight: 16,
		Retry: ports.RetryPolicy{MaxAttempts: 5, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}}
}

// start starts p, stopped at the end of the test.
func (w *world) start(p *flow.Pipeline) {
	w.t.Helper()
	if err := p.Start(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = p.Stop(ctx)
	})
}

// options are the pipeline options of every consumer: the ledger
// observer and an error collector.
func (w *world) options(extra ...flow.Option) []flow.Option {
	return append([]flow.Option{w.l.Observer(), flow.WithErrorHandler(func(err error) {
		select {
		case w.errs <- err:
		default:
		}
	})}, extra...)
}

// send sends v as JSON with key and id ("" for a fresh id) through the
// ledger and returns the id.
func (w *world) send(a ports.Sender, key, id string, v any) string {
	w.t.Helper()
	m, err := flow.NewMessage(w.ctx, w.topic, v, flow.Key(key))
	if err != nil {
		w.t.Fatal(err)
	}
	if id == "" {
		id = w.l.NewID()
	}
	m.Headers.Set(ports.HeaderID, id)
	if err := w.l.Send(w.ctx, a, m); err != nil {
		w.t.Fatalf("send: %v", err)
	}
	return id
}

// settled waits until every confirmed message was acked or dead-lettered.
func (w *world) settled() {
	w.t.Helper()
	if err := w.l.AwaitSettled(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

// errorMatching waits for a reported error that matches.
func (w *world) errorMatching(what string, match func(error) bool) error {
	w.t.Helper()
	for {
		select {
		case err := <-w.errs:
			if match(err) {
				return err
			}
		case <-w.ctx.Done():
			w.t.Fatalf("no reported error: %s", what)
			return nil
		}
	}
}

var errFenced = errors.New("fenced: this consumer no longer owns the queue")

// claimOwnership makes the caller the owner of queue and returns its
// fencing epoch.
func claimOwnership(ctx context.Context, db *sql.DB, queue string) (int64, error) {
	var epoch int64
	err := db.QueryRowContext(ctx, `INSERT INTO owners(queue, epoch) VALUES (?, 1)
		ON CONFLICT(queue) DO UPDATE SET epoch = epoch + 1 RETURNING epoch`, queue).Scan(&epoch)
	if err != nil {
		return 0, fmt.Errorf("claim %s: %w", queue, err)
	}
	return epoch, nil
}

// checkOwner fails with errFenced when epoch is no longer queue's owner.
func checkOwner(ctx context.Context, tx *sql.Tx, queue string, epoch int64) error {
	var cur int64
	if err := tx.QueryRowContext(ctx, `SELECT epoch FROM owners WHERE queue = ?`, queue).Scan(&cur); err != nil {
		return err
	}
	if cur != epoch {
		return fmt.Errorf("%w (epoch %d, owner now %d)", errFenced, epoch, cur)
	}
	return nil
}
