package reliability_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// The message-state guarantees, asserted on the authoritative state (the
// database), not on "the send did not fail" or "a message arrived".

type payment struct {
	Account string `json:"account"`
	Amount  int    `json:"amount"`
}

// credit adds p to its account and records the write, in tx.
func credit(ctx context.Context, tx *sql.Tx, id string, p payment) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO accounts(account, balance) VALUES (?, ?)
		ON CONFLICT(account) DO UPDATE SET balance = balance + excluded.balance`, p.Account, p.Amount); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO writes(message_id, account) VALUES (?, ?)`, id, p.Account)
	return err
}

// The same message id delivered eleven times (published ten times, and
// the first delivery's ack lost after the commit) makes exactly one
// business write.
func TestIdempotentConsumer_SameIDReplayedTenTimes_OneWrite(t *testing.T) {
	w := newWorld(t, "idempotent-replay")
	db := openDB(t, 2)
	a := w.adapter()
	var applied, absorbed atomic.Int32
	var ackLost atomic.Bool
	p := flow.New(a, w.spec("billing"), w.options()...)
	flow.Sink(flow.Decode[payment](p.Source()), func(ctx context.Context, pay payment) error {
		id := flow.DeliveryFrom(ctx).ID
		ok, err := applyOnce(ctx, db, id, func(tx *sql.Tx) error { return credit(ctx, tx, id, pay) })
		if err != nil {
			return err
		}
		if ok {
			applied.Add(1)
		} else {
			absorbed.Add(1)
		}
		if ackLost.CompareAndSwap(false, true) {
			return errors.New("process crashed after the commit, before the ack")
		}
		return nil
	}, flow.Workers(4))
	w.start(p)

	id := w.l.NewID()
	for range 10 {
		w.send(a, "acct-1", id, payment{Account: "acct-1", Amount: 25})
	}
	w.settled()
	if err := w.l.Await(w.ctx, "eleven deliveries handled", func(c tck.Counts) bool { return c.Delivered == 11 && c.InFlight == 0 }); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM writes`); n != 1 {
		t.Fatalf("%d business writes for one message id delivered 11 times, want 1", n)
	}
	if b := count(t, db, `SELECT balance FROM accounts WHERE account = 'acct-1'`); b != 25 {
		t.Fatalf("balance %d, want 25", b)
	}
	if applied.Load() != 1 || absorbed.Load() != 10 {
		t.Fatalf("applied %d, absorbed %d; want 1 and 10", applied.Load(), absorbed.Load())
	}
	if r := w.l.Report(); r.Duplicates < 9 || r.RepeatedEffects != 1 {
		t.Fatalf("ledger %+v: want at least 9 duplicates of one message", r)
	}
}

type versioned struct {
	Key     string `json:"key"`
	Version int    `json:"version"`
	Value   string `json:"value"`
}

// upsertNewer writes v unless the stored version is the same or newer.
const upsertNewer = `INSERT INTO state(key, version, value) VALUES (?, ?, ?)
	ON CONFLICT(key) DO UPDATE SET version = excluded.version, value = excluded.value
	WHERE excluded.version > state.version`

// upsertBlind is the naive write that lets an older version overwrite.
const upsertBlind = `INSERT INTO state(key, version, value) VALUES (?, ?, ?)
	ON CONFLICT(key) DO UPDATE SET version = excluded.version, value = excluded.value`

// versionedEvents returns keys×versions events in a shuffled order, with
// some repeated, the same for every run.
func versionedEvents(keys, versions int) []versioned {
	var evs []versioned
	for k := range keys {
		for v := 1; v <= versions; v++ {
			evs = append(evs, versioned{Key: "k" + string(rune('a'+k)), Version: v, Value: "v" + string(rune('0'+v%10))})
		}
	}
	rng := rand.New(rand.NewPCG(8, 3))
	for range len(evs) / 5 {
		evs = append(evs, evs[rng.IntN(len(evs))])
	}
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	return evs
}

// runVersioned sends evs and applies each with query on workers handlers;
// it returns the database once every message settled.
func runVersioned(t *testing.T, fault, query string, workers int, evs []versioned) *sql.DB {
	w := newWorld(t, fault)
	db := openDB(t, 4)
	a := w.adapter()
	p := flow.New(a, w.spec("projection"), w.options()...)
	flow.Sink(flow.Decode[versioned](p.Source()), func(ctx context.Context, v versioned) error {
		_, err := db.ExecContext(ctx, query, v.Key, v.Version, v.Value)
		return err
	}, flow.Workers(workers))
	w.start(p)
	for _, ev := range evs {
		w.send(a, ev.Key, "", ev)
	}
	w.settled()
	return db
}

// Versions delivered out of order and repeated, by concurrent handlers:
// an older version never overwrites a newer one, and each key ends at its
// newest version. A blind upsert under the same order does regress, so
// the audit would catch it.
func TestOlderVersionNeverOverwritesNewer(t *testing.T) {
	const keys, versions = 4, 25
	evs := versionedEvents(keys, versions)
	db := runVersioned(t, "version-order", upsertNewer, 8, evs)
	if n := count(t, db, `SELECT count(*) FROM audit WHERE new_version <= old_version`); n != 0 {
		t.Fatalf("%d update(s) replaced a version by an older or equal one", n)
	}
	if n := count(t, db, `SELECT count(*) FROM state WHERE version = ?`, versions); n != keys {
		t.Fatalf("%d of %d keys at their newest version %d", n, keys, versions)
	}
	t.Logf("%d events (%d keys × %d versions, shuffled, %d repeats) applied by 8 handlers; audit shows no regression",
		len(evs), keys, versions, len(evs)-keys*versions)

	t.Run("control_blind_upsert_regresses", func(t *testing.T) {
		db := runVersioned(t, "version-order-blind-control", upsertBlind, 1, evs)
		if n := count(t, db, `SELECT count(*) FROM audit WHERE new_version < old_version`); n == 0 {
			t.Fatal("a blind upsert of shuffled versions never regressed: the audit proves nothing")
		} else {
			t.Logf("the blind upsert regressed %d time(s) under the same order", n)
		}
	})
}

type ledgerEvent struct {
	Account string `json:"account"`
	Amount  int    `json:"amount"`
	Kind    string `json:"kind,omitempty"` // "reject": a business rule refuses it; "flaky": fails every attempt
}

// A poison message and a message that fails on every attempt, both on key
// A, do not hold up key B: every write of B commits while A's failing
// message is still being retried, A's poison is dead-lettered at once, and
// A's later healthy messages commit too.
func TestPoisonOnOneKeyDoesNotBlockHealthyKey(t *testing.T) {
	w := newWorld(t, "poison-key")
	db := openDB(t, 4)
	a := w.adapter()
	var mu sync.Mutex
	var lastB time.Time
	dead := make(chan string, 8)
	deadAt := map[string]time.Time{}

	dspec := w.spec("billing-dlq")
	dspec.Topic = ports.DeadLetterTopic(w.topic)
	dp := flow.New(a, dspec, flow.WithErrorHandler(func(error) {}), w.l.DeadLetterObserver())
	flow.Sink(dp.Source(), func(_ context.Context, d *ports.Delivery) error {
		mu.Lock()
		deadAt[d.ID] = time.Now()
		mu.Unlock()
		dead <- d.ID
		return nil
	})
	w.start(dp)

	spec := w.spec("billing")
	spec.Retry = ports.RetryPolicy{MaxAttempts: 4, Backoff: 150 * time.Millisecond, MaxBackoff: time.Second, Jitter: 0.01}
	p := flow.New(a, spec, w.options()...)
	flow.Sink(flow.Decode[ledgerEvent](p.Source()), func(ctx context.Context, ev ledgerEvent) error {
		switch ev.Kind {
		case "reject":
			return ports.Poisonf("account %s is closed", ev.Account)
		case "flaky":
			return errors.New("the ledger service timed out")
		}
		id := flow.DeliveryFrom(ctx).ID
		_, err := applyOnce(ctx, db, id, func(tx *sql.Tx) error {
			return credit(ctx, tx, id, payment{Account: ev.Account, Amount: ev.Amount})
		})
		if err == nil && ev.Account == "B" {
			mu.Lock()
			lastB = time.Now()
			mu.Unlock()
		}
		return err
	}, flow.Workers(4))
	w.start(p)

	undecodable := ports.Message{Topic: w.topic, Key: "A", Payload: []byte(`{"account": "A", "amount": `),
		Headers: ports.NewHeaders(ports.HeaderID, w.l.NewID())}
	if err := w.l.Send(w.ctx, a, undecodable); err != nil {
		t.Fatal(err)
	}
	rejected := w.send(a, "A", "", ledgerEvent{Account: "A", Amount: 1, Kind: "reject"})
	flaky := w.send(a, "A", "", ledgerEvent{Account: "A", Amount: 1, Kind: "flaky"})
	for range 50 {
		w.send(a, "B", "", ledgerEvent{Account: "B", Amount: 2})
	}
	for range 5 {
		w.send(a, "A", "", ledgerEvent{Account: "A", Amount: 3})
	}
	w.settled()
	for range 3 {
		select {
		case <-dead:
		case <-w.ctx.Done():
			t.Fatal("the three bad messages of key A did not all reach the dead-letter topic")
		}
	}
	if b := count(t, db, `SELECT balance FROM accounts WHERE account = 'B'`); b != 100 {
		t.Fatalf("key B balance %d, want 100 (50 writes of 2)", b)
	}
	if b := count(t, db, `SELECT balance FROM accounts WHERE account = 'A'`); b != 15 {
		t.Fatalf("key A balance %d, want 15 (its 5 healthy writes)", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if !lastB.Before(deadAt[flaky]) {
		t.Fatalf("key B's last write at %v, after key A's failing message was dead-lettered at %v: B waited behind A", lastB, deadAt[flaky])
	}
	if _, ok := deadAt[rejected]; !ok {
		t.Fatal("the rejected message of key A was not dead-lettered")
	}
	t.Logf("key B finished %v before key A's failing message exhausted its retries", deadAt[flaky].Sub(lastB).Round(time.Millisecond))
}
