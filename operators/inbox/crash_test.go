package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/inbox"
	"github.com/sluicemq/sluice/ports"

	_ "github.com/sluicemq/sluice/adapters/amqp"  // amqp://
	_ "github.com/sluicemq/sluice/adapters/redis" // redis://
)

// The crash tests publish crashMessages messages, each with a producer
// id, then consume them through inbox.Sink into a database with a
// consumer that dies right after the commit of its crashAfter-th message
// and before that message is acked, then with a fresh consumer; at the
// end every message has exactly one effect (no duplicate, none lost), and
// the fresh consumer suppressed at least one duplicate (the message whose
// ack the crash lost).
const (
	crashMessages = 20
	crashAfter    = 7
	crashTopic    = "inbox-crash"
	crashGroup    = "billing"
)

// crashChildEnv carries a crashChild's configuration (JSON) to a copy of
// the test binary started by runChild.
const crashChildEnv = "SLUICE_INBOX_CRASH_CHILD"

// crashChild configures a consumer process.
type crashChild struct {
	URL string
	DB  dbTarget
	// KillAfter: SIGKILL itself right after the commit of its KillAfter-th
	// message (0: never).
	KillAfter int
	// The child exits 0 once every message has an effect and it
	// suppressed a duplicate.
	Total int
}

func TestMain(m *testing.M) {
	if c := os.Getenv(crashChildEnv); c != "" {
		os.Exit(runCrashChild(c))
	}
	os.Exit(m.Run())
}

// runCrashChild is the consumer process of a crash test.
func runCrashChild(conf string) int {
	var c crashChild
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := consume(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func consume(ctx context.Context, c crashChild) error {
	a, err := adapters.Open(ctx, c.URL)
	if err != nil {
		return err
	}
	defer a.Close(context.Background())
	db, err := sql.Open(c.DB.Driver, c.DB.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, effectsTable(c.DB.Dialect)); err != nil {
		return err
	}
	var committed atomic.Int64
	ib, err := inbox.New(ctx, db, inbox.Options{AfterCommit: func(context.Context, *ports.Delivery) {
		if committed.Add(1) == int64(c.KillAfter) {
			// The crash: the effect and the record are committed, the
			// ack is not sent.
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // SIGKILL is not handled; nothing runs after it
		}
	}})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	poke := make(chan struct{}, 1)
	p := flow.New(a, ports.SubscriptionSpec{Topic: crashTopic, Group: crashGroup, QoS: ports.ExactlyOnce},
		flow.WithObserver(func(e flow.Event) {
			if e.Action == ports.Ack {
				select {
				case poke <- struct{}{}:
				default:
				}
			}
		}))
	inbox.Sink(p.Source(), ib, writeEffectIn(c.DB.Dialect))
	// Done when every message has its effect and the lost ack's
	// redelivery was suppressed.
	go func() {
		for {
			select {
			case <-poke:
			case <-runCtx.Done():
				return
			}
			var n int
			if err := db.QueryRowContext(runCtx, `SELECT COUNT(DISTINCT msg) FROM effects`).Scan(&n); err != nil {
				continue
			}
			if n >= c.Total && ib.Stats().Duplicates > 0 {
				stop()
				return
			}
		}
	}()
	if err := p.Run(runCtx); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("not done before the child's deadline: %+v", ib.Stats())
	}
	s := ib.Stats()
	fmt.Printf("child: processed %d, duplicates suppressed %d\n", s.Processed, s.Duplicates)
	return nil
}

// runChild starts a consumer process and waits for it, bounded by ctx.
func runChild(ctx context.Context, t *testing.T, c crashChild) (*os.ProcessState, string) {
	t.Helper()
	conf, _ := json.Marshal(c)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+string(conf))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return cmd.ProcessState, string(out)
}

// dbTarget is a database the crash test's consumers open.
type dbTarget struct {
	Driver, DSN string
	Dialect     inbox.Dialect
}

// sqliteTarget is a fresh SQLite database file for t.
func sqliteTarget(t *testing.T) dbTarget {
	path := filepath.Join(t.TempDir(), "effects.db")
	return dbTarget{Driver: "sqlite", DSN: "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)", Dialect: inbox.SQLite}
}

func (d dbTarget) open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open(d.Driver, d.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// crashOnBroker runs the crash test against the broker at url, with the
// effects in target.
func crashOnBroker(t *testing.T, url string, target dbTarget) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, err := adapters.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if err := ports.DeclareGroup(ctx, a, crashTopic, crashGroup); err != nil {
		a.Close(context.Background())
		t.Fatal(err)
	}
	for i := range crashMessages {
		send(ctx, t, a, crashTopic, fmt.Sprintf("m-%d", i), fmt.Sprintf("v-%d", i))
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}

	st, out := runChild(ctx, t, crashChild{URL: url, DB: target, KillAfter: crashAfter, Total: crashMessages})
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the first consumer was not killed after its commit %d: %v\n%s", crashAfter, st, out)
	}
	st, out = runChild(ctx, t, crashChild{URL: url, DB: target, Total: crashMessages})
	if !st.Success() {
		t.Fatalf("the restarted consumer: %v\n%s", st, out)
	}
	t.Logf("after the kill: %s", strings.TrimSpace(out))
	checkExactlyOnce(t, target.open(t), crashMessages)
}

// checkExactlyOnce fails t unless each of the n messages has exactly one
// effect.
func checkExactlyOnce(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	got := effectCounts(t, db)
	dups, lost := 0, 0
	for i := range n {
		switch c := got[fmt.Sprintf("v-%d", i)]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	if dups != 0 || lost != 0 || len(got) != n {
		t.Errorf("effects: %d duplicates, %d lost, %d distinct (want 0, 0, %d): %v", dups, lost, len(got), n, got)
	}
}

// Redis outlives the consumer it SIGKILLs after a commit; the restarted
// consumer claims the unacked entries (claim_min_idle) and suppresses the
// one whose effect was committed.
func TestCrashAfterCommitRedis(t *testing.T) {
	srv := redistest.Own(t, redistest.Options{Durable: true})
	crashOnBroker(t, srv.URL+"?claim_min_idle=500ms", sqliteTarget(t))
}

// RabbitMQ requeues what the killed consumer's connection held.
func TestCrashAfterCommitAMQP(t *testing.T) {
	node := rabbittest.Own(t, rabbittest.Options{})
	crashOnBroker(t, node.URL, sqliteTarget(t))
}

// On mem (broker and consumer in this process) the crash is a stop
// between the commit and the ack: the hook holds the item until the stop
// cancelled it, so its completion comes after the stop and is not
// settled; the broker redelivers it to the next consumer.
func TestCrashAfterCommitMem(t *testing.T) {
	db := openSQLite(t)
	createEffects(t, db)
	crashOnMem(t, db, inbox.SQLite)
}

// crashOnMem is TestCrashAfterCommitMem with the effects in db.
func crashOnMem(t *testing.T, db *sql.DB, dialect inbox.Dialect) {
	ctx := testCtx(t)
	a := memAdapter(t)
	if err := ports.DeclareGroup(ctx, a, crashTopic, crashGroup); err != nil {
		t.Fatal(err)
	}
	for i := range crashMessages {
		send(ctx, t, a, crashTopic, fmt.Sprintf("m-%d", i), fmt.Sprintf("v-%d", i))
	}
	consumer := func(killAfter int) (*flow.Pipeline, *inbox.Inbox, chan struct{}) {
		hit := make(chan struct{})
		var committed atomic.Int64
		ib, err := inbox.New(ctx, db, inbox.Options{AfterCommit: func(ctx context.Context, _ *ports.Delivery) {
			if committed.Add(1) == int64(killAfter) {
				close(hit)
				<-ctx.Done() // the stop cancels the item
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		p := flow.New(a, ports.SubscriptionSpec{Topic: crashTopic, Group: crashGroup, QoS: ports.ExactlyOnce}, flow.WithDrainTimeout(0))
		inbox.Sink(p.Source(), ib, writeEffectIn(dialect))
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return p, ib, hit
	}
	p, _, hit := consumer(crashAfter)
	select {
	case <-hit:
	case <-ctx.Done():
		t.Fatal("the first consumer did not commit its messages")
	}
	var ab *flow.AbandonedError
	if err := p.Stop(ctx); !errors.As(err, &ab) || ab.InFlight == 0 {
		t.Fatalf("Stop = %v, want the committed message abandoned unacked", err)
	}

	settled := make(settlements, 4*crashMessages)
	p2 := flow.New(a, ports.SubscriptionSpec{Topic: crashTopic, Group: crashGroup, QoS: ports.ExactlyOnce}, flow.WithObserver(settled.observe))
	ib2, err := inbox.New(ctx, db, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inbox.Sink(p2.Source(), ib2, writeEffectIn(dialect))
	if err := p2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p2.Stop(context.Background())
	for ib2.Stats().Duplicates == 0 || len(effectCounts(t, db)) < crashMessages {
		if e := settled.next(ctx, t); e.Action != ports.Ack {
			t.Fatalf("%s settled with %v (%v)", e.Delivery.ID, e.Action, e.Outcome.Err)
		}
	}
	t.Logf("after the crash: %+v", ib2.Stats())
	checkExactlyOnce(t, db, crashMessages)
}
