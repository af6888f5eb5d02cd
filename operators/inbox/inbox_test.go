package inbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/inbox"
	"github.com/sluicemq/sluice/ports"
)

// New detects SQLite from the driver, creates the table once, and
// validates its options.
func TestNewDetectsAndValidates(t *testing.T) {
	ctx := testCtx(t)
	db := openSQLite(t)
	ib, err := inbox.New(ctx, db, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ib.Dialect() != inbox.SQLite || ib.Table() != inbox.DefaultTable {
		t.Errorf("dialect %q table %q, want sqlite and %s", ib.Dialect(), ib.Table(), inbox.DefaultTable)
	}
	if _, err := inbox.New(ctx, db, inbox.Options{}); err != nil {
		t.Errorf("New on an existing table: %v", err)
	}
	for _, bad := range []inbox.Options{{Table: "x; DROP TABLE y"}, {Dialect: "oracle"}, {WithoutIdentity: 7}} {
		if _, err := inbox.New(ctx, db, bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
}

// fakeDriver is a database/sql driver the inbox does not know.
type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) { return nil, errors.New("fake") }

func init() { sql.Register("inbox-fake", fakeDriver{}) }

// An unknown driver is a clear error that says what to set.
func TestUnknownDriver(t *testing.T) {
	db, err := sql.Open("inbox-fake", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = inbox.New(testCtx(t), db, inbox.Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.Dialect") {
		t.Fatalf("New with an unknown driver = %v, want an error naming Options.Dialect", err)
	}
}

// Purge deletes the records older than the age it is given, and Seen
// stops finding them.
func TestPurge(t *testing.T) {
	ctx := testCtx(t)
	db := openSQLite(t)
	createEffects(t, db)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	ib, err := inbox.New(ctx, db, inbox.Options{Clock: func() time.Time { return *clock.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	a := memAdapter(t)
	settled := make(settlements, 8)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "in", Group: "g", QoS: ports.ExactlyOnce}, flow.WithObserver(settled.observe))
	inbox.Sink(p.Source(), ib, writeEffect)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	send(ctx, t, a, "in", "old", "a")
	settled.next(ctx, t)
	later := now.Add(48 * time.Hour)
	clock.Store(&later)
	send(ctx, t, a, "in", "new", "b")
	settled.next(ctx, t)

	n, err := ib.Purge(ctx, 24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1 record", n, err)
	}
	for id, want := range map[string]bool{"old": false, "new": true} {
		if seen, err := ib.Seen(ctx, id); err != nil || seen != want {
			t.Errorf("Seen(%s) = %v, %v; want %v", id, seen, err, want)
		}
	}
	if _, err := ib.Purge(ctx, -time.Second); err == nil {
		t.Error("Purge with a negative age accepted")
	}
}

// Many workers and every message delivered three times: one effect per
// message.
func TestConcurrentDuplicates(t *testing.T) {
	db := openSQLite(t)
	createEffects(t, db)
	concurrentDuplicates(t, db, inbox.SQLite)
}

func concurrentDuplicates(t *testing.T, db *sql.DB, dialect inbox.Dialect) {
	ctx := testCtx(t)
	a := memAdapter(t)
	ib, err := inbox.New(ctx, db, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	settled := make(settlements, 256)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "in", Group: "g", QoS: ports.ExactlyOnce}, flow.WithObserver(settled.observe))
	inbox.Sink(p.Source(), ib, writeEffectIn(dialect), flow.Workers(4))
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	const msgs, copies = 30, 3
	for i := range msgs {
		for range copies {
			send(ctx, t, a, "in", fmt.Sprintf("m-%d", i), fmt.Sprintf("v-%d", i))
		}
	}
	for range msgs * copies {
		if e := settled.next(ctx, t); e.Action != ports.Ack {
			t.Fatalf("%s settled with %v (%v)", e.Delivery.ID, e.Action, e.Outcome.Err)
		}
	}
	got := effectCounts(t, db)
	for i := range msgs {
		if n := got[fmt.Sprintf("v-%d", i)]; n != 1 {
			t.Errorf("message %d has %d effects, want 1", i, n)
		}
	}
	if s := ib.Stats(); s.Processed != msgs || s.Duplicates != msgs*(copies-1) {
		t.Errorf("stats %+v, want %d processed and %d duplicates", s, msgs, msgs*(copies-1))
	}
}
