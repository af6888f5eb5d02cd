package inbox_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/inbox"
	"github.com/sluicemq/sluice/ports"
	_ "modernc.org/sqlite"
)

// openSQLite opens a fresh SQLite database file for t, with a busy
// timeout so that concurrent writers wait instead of failing.
func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	return openSQLiteAt(t, filepath.Join(t.TempDir(), "inbox.db"))
}

func openSQLiteAt(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// effectsTable is the table the test handlers write their effect to: one
// row per handling, so a second effect of one message is a second row.
func effectsTable(d inbox.Dialect) string {
	if d == inbox.Postgres {
		return `CREATE TABLE IF NOT EXISTS effects (n BIGSERIAL PRIMARY KEY, msg TEXT NOT NULL)`
	}
	return `CREATE TABLE IF NOT EXISTS effects (n INTEGER PRIMARY KEY AUTOINCREMENT, msg TEXT NOT NULL)`
}

func createEffects(t testing.TB, db *sql.DB) {
	t.Helper()
	createEffectsIn(t, db, inbox.SQLite)
}

func createEffectsIn(t testing.TB, db *sql.DB, d inbox.Dialect) {
	t.Helper()
	if _, err := db.Exec(effectsTable(d)); err != nil {
		t.Fatal(err)
	}
}

// writeEffect is a handler that records the delivery's effect in tx
// (SQLite).
func writeEffect(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error {
	return writeEffectIn(inbox.SQLite)(ctx, tx, d)
}

// writeEffectIn returns the handler writing the effect in dialect d.
func writeEffectIn(d inbox.Dialect) func(context.Context, *sql.Tx, *ports.Delivery) error {
	q := `INSERT INTO effects (msg) VALUES (?)`
	if d == inbox.Postgres {
		q = `INSERT INTO effects (msg) VALUES ($1)`
	}
	return func(ctx context.Context, tx *sql.Tx, del *ports.Delivery) error {
		_, err := tx.ExecContext(ctx, q, string(del.Payload))
		return err
	}
}

// effectCounts returns how many effect rows each message has.
func effectCounts(t testing.TB, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query(`SELECT msg, COUNT(*) FROM effects GROUP BY msg`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var m string
		var n int
		if err := rows.Scan(&m, &n); err != nil {
			t.Fatal(err)
		}
		got[m] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// memAdapter returns an adapter on a private mem broker.
func memAdapter(t testing.TB) *mem.Adapter {
	t.Helper()
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	a, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}

// settlements collects the pipeline's settlement events.
type settlements chan flow.Event

func (s settlements) observe(e flow.Event) {
	if !e.Received {
		s <- e
	}
}

// next returns the next settlement event, failing t after a bounded wait.
func (s settlements) next(ctx context.Context, t testing.TB) flow.Event {
	t.Helper()
	select {
	case e := <-s:
		return e
	case <-ctx.Done():
		t.Fatalf("no settlement: %v", ctx.Err())
		return flow.Event{}
	}
}

func send(ctx context.Context, t testing.TB, a ports.Adapter, topic ports.Topic, id, payload string) {
	t.Helper()
	if err := a.Send(ctx, ports.Message{Topic: topic, Payload: []byte(payload), Headers: ports.NewHeaders(ports.HeaderID, id)}); err != nil {
		t.Fatal(err)
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
