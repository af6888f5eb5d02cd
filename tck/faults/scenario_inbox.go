package faults

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/inbox"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"

	_ "modernc.org/sqlite" // the effects database: SQLite, pure Go
)

// The inbox-kill scenario's consumers end their pipeline with inbox.Sink
// into a SQLite file: the business effect is one row per delivery in
// effectsTable, written in the transaction that records the delivery's
// identity in inboxTable. The file is shared by the consumer processes
// and the test process.
const (
	effectsTable  = "faults_effects"
	inboxTable    = "faults_inbox"
	inboxInFlight = 4
	sqliteDriver  = "sqlite"
)

func init() {
	register("inbox-kill", always, scenarioInboxKill)
}

// inboxSpec is the exactly-once subscription of the inbox-kill scenario
// (in the test process and in its consumer processes alike). Retries are
// generous: a crash redelivery is not a failure, and a busy database may
// requeue a delivery a few times.
func inboxSpec(topic ports.Topic, group string) ports.SubscriptionSpec {
	return ports.SubscriptionSpec{
		Topic: topic, Group: group, InFlight: inboxInFlight, QoS: ports.ExactlyOnce,
		Retry: ports.RetryPolicy{MaxAttempts: 20, Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
	}
}

// openEffects opens the effects database at path (WAL, so that processes
// write it side by side; a busy timeout longer than any transaction) and
// creates the effects table. The table has no key: a second effect of one
// message is a second row, there to be counted.
func openEffects(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sql.Open(sqliteDriver, "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+effectsTable+` (msg TEXT NOT NULL, payload BLOB NOT NULL)`); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("creating %s in %s: %w", effectsTable, path, err)
	}
	return db, nil
}

// countEffects returns the number of effect rows per message id.
func countEffects(ctx context.Context, db *sql.DB) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT msg, COUNT(*) FROM `+effectsTable+` GROUP BY msg`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// inboxHooks are what an inbox pipeline reports.
type inboxHooks struct {
	// observe gets every pipeline event.
	observe func(flow.Event)
	// committed is called after a delivery's effect and inbox record
	// committed and before its item succeeds (so before the ack): the
	// crash window. It may block.
	committed func(ctx context.Context, d *ports.Delivery)
	// suppressed is called when a delivery was acked without an effect
	// in this pipeline: the inbox found its identity recorded.
	suppressed func(d *ports.Delivery)
}

// inboxPipeline builds on a the scenario's exactly-once pipeline of spec:
// flow.New → inbox.Sink, whose function inserts the delivery's effect row
// through the inbox's transaction.
func inboxPipeline(ctx context.Context, a ports.Adapter, spec ports.SubscriptionSpec, db *sql.DB, h inboxHooks, opts ...flow.Option) (*flow.Pipeline, error) {
	var effected sync.Map // deliveries whose effect committed in this pipeline
	ib, err := inbox.New(ctx, db, inbox.Options{
		Table:  inboxTable,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		AfterCommit: func(ctx context.Context, d *ports.Delivery) {
			effected.Store(d, struct{}{})
			if h.committed != nil {
				h.committed(ctx, d)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	observe := func(ev flow.Event) {
		if h.observe != nil {
			h.observe(ev)
		}
		if ev.Received || ev.Delivery == nil {
			return
		}
		if _, ok := effected.LoadAndDelete(ev.Delivery); !ok && ev.Action == ports.Ack && h.suppressed != nil {
			h.suppressed(ev.Delivery)
		}
	}
	p := flow.New(a, spec, append([]flow.Option{flow.WithObserver(observe)}, opts...)...)
	inbox.Sink(p.Source(), ib, effect, flow.Workers(spec.WithDefaults().InFlight))
	return p, nil
}

// effect is the business effect: one row per delivery, keyed by the
// message id, written through the inbox's transaction.
func effect(ctx context.Context, tx *sql.Tx, d *ports.Delivery) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO `+effectsTable+` (msg, payload) VALUES (?, ?)`, d.ID, d.Payload)
	return err
}

// inboxVictim is a consumer of the inbox-kill scenario that the scenario
// crashes: a consumer process it SIGKILLs, or (in-process brokers) a
// pipeline whose connection it abandons.
type inboxVictim interface {
	// awaitHeld waits until the consumer committed a delivery's effect and
	// holds it there, before the ack, and returns its id.
	awaitHeld() string
	// awaitCommits waits until the consumer committed n effects.
	awaitCommits(n int)
	// commits is the number of effects the consumer committed so far.
	commits() int
	// crash crashes the consumer.
	crash(what string)
	// lostReport reports whether the consumer was handed id and the
	// report of what it did with it may have died with it: then a
	// suppression there may not have been counted.
	lostReport(id string) bool
}

// inbox-kill: exactly once across consumer crashes. N messages with
// distinct ids go to a group whose consumer runs flow.New with QoS
// ExactlyOnce → inbox.Sink into a SQLite file (the effect: one row per
// message in a business table, in the transaction that records the
// delivery's identity). The consumer is crashed right after the commit of
// a random message and before its ack; its replacement (the same process
// identity: a restart) is crashed again at a random point mid-stream; a
// third one finishes the group. Then the ledger counts the effects per
// message id: a confirmed message without an effect is lost, a message
// with two is a dup-effect, and both fail the scenario; the inbox must
// have suppressed at least one duplicate delivery (the crash window was
// hit), or the scenario proved nothing and fails.
//
// Where the broker is reached over the network the consumers are
// processes (this test binary, re-executed) and the crash is a SIGKILL.
// On an in-process broker the crash is simulated: the consumer's adapter
// is closed (the broker takes back every unsettled delivery, as it does
// from a dead connection) while its handlers are held after the commit;
// then they are let go and their acks fail on the closed subscription.
// Unlike a SIGKILL, handlers that were running go on to their commit (a
// zombie): the inbox's key decides between them and the redelivery.
func scenarioInboxKill(e *env) {
	spec := inboxSpec(e.topic, e.group)
	path := filepath.Join(e.t.TempDir(), "effects.db")
	db, err := openEffects(e.ctx, path)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = db.Close() })
	process := networked(e.b, e.target) == ""
	start := func(identity string, hold int) inboxVictim {
		if process {
			return e.startInboxChild(identity, spec, db, path, hold)
		}
		return e.startInboxLocal(identity, spec, db, hold)
	}
	n := max(e.target.Messages/4, 40)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	hold := 1 + rng.IntN(n/4)
	identity := e.identity()
	first := start(identity, hold)
	a := e.adapter()
	e.produce(a, n, 0, func(i int) ports.Message { return e.message(i, false) }).wait(e)

	held := first.awaitHeld()
	first.crash("kill-after-commit")
	e.t.Logf("crashed the first consumer right after the commit of its effect #%d (%s), before its ack; %d effect(s) committed by then", hold, held, first.commits())

	rest := max(n-first.commits(), 2)
	at := 1 + rng.IntN(rest/2)
	second := start(identity, 0)
	second.awaitCommits(at)
	reached := second.commits()
	second.crash("kill-mid-stream")
	e.t.Logf("crashed the restarted consumer mid-stream once it had committed %d effect(s) (random point %d of the %d left; seed %d); %d by the time it died",
		reached, at, rest, seed, second.commits())

	e.l.Mark("fresh-consumer")
	fresh := e.consumeInbox(e.dialAs(e.b.Addr, identity), spec, db)
	// Every message settled, or its effect committed by a process that
	// was killed before it could say whether its ack went out (when it
	// did, the broker never hands the message out again).
	ctx, cancel := withTimeout(e.ctx, e.target)
	waited := e.l.Await(ctx, "every confirmed message acked, or committed by a killed process that may have acked it", func(c tck.Counts) bool {
		return c.Settled+c.AckUnknown >= c.Confirmed
	})
	cancel()
	fresh.stop()
	counts, err := countEffects(e.ctx, db)
	if err != nil {
		e.t.Fatalf("counting the effects: %v", err)
	}
	e.l.Effects(counts) // in the LEDGER line even when the wait failed
	if waited != nil {
		e.t.Fatal(waited)
	}
	r := e.l.Report()
	e.t.Logf("effects: %d message(s) with one, %d with more (%d extra row(s)), %d confirmed without; the inbox suppressed %d duplicate delivery(ies)",
		r.Effects.Distinct-r.Effects.DupEffects, r.Effects.DupEffects, r.Effects.DupEffectRows, r.Effects.NoEffect, r.Effects.Suppressed)
	// A redelivery of the held message to the second consumer, suppressed
	// and acked there with its report lost in the kill, proves the window
	// as well: it has its one effect and did not come back.
	if r.Effects.Suppressed == 0 && second.lostReport(held) && counts[held] == 1 {
		e.t.Logf("%s was redelivered to the restarted consumer, which was killed before it reported what it did; it has one effect and was not handed out again: suppressed there", held)
	} else if r.Effects.Suppressed == 0 {
		e.t.Fatalf("the inbox suppressed no duplicate delivery: %s, committed and held before its ack when its consumer crashed, was not redelivered, or was handled again: the crash window was not proven", held)
	}
}

// consumeInbox starts, in the test process, the scenario's exactly-once
// pipeline of spec on a into db, recorded by the ledger; stopped at the
// end of the scenario at the latest.
func (e *env) consumeInbox(a ports.Adapter, spec ports.SubscriptionSpec, db *sql.DB, committed ...func(context.Context, *ports.Delivery)) *consumer {
	e.t.Helper()
	h := inboxHooks{observe: e.l.Observe, suppressed: func(d *ports.Delivery) { e.l.Suppressed(d.ID) }}
	if len(committed) > 0 {
		h.committed = committed[0]
	}
	p, err := inboxPipeline(e.ctx, a, spec, db, h,
		flow.WithErrorHandler(e.onError), flow.WithDrainTimeout(2*time.Second), flow.WithSettleTimeout(10*time.Second))
	if err != nil {
		e.t.Fatalf("making the inbox of the consumer: %v", err)
	}
	c := &consumer{e: e, spec: spec, p: p}
	e.mu.Lock()
	c.proc = e.procs[a]
	e.consumers = append(e.consumers, c)
	e.mu.Unlock()
	if err := p.Start(e.ctx); err != nil {
		e.t.Fatalf("starting an exactly-once consumer of %s: %v", spec.Topic, err)
	}
	e.t.Cleanup(c.stop)
	return c
}

// commitCounter counts a consumer's committed effects and holds them from
// the hold-th on (0: never), reporting the first held one.
type commitCounter struct {
	mu   sync.Mutex
	n    int
	hold int
	// remote: the commits are another process's, which holds them
	// itself; the counter only counts (its held is fed from outside).
	remote bool
	held   chan string   // the first held delivery's id
	more   chan struct{} // closed and replaced at every commit
	freed  chan struct{} // closed to let held commits go on (in-process)
}

func newCommitCounter(hold int) *commitCounter {
	return &commitCounter{hold: hold, held: make(chan string, 1), more: make(chan struct{}), freed: make(chan struct{})}
}

// committed counts one commit and reports whether it is to be held.
func (c *commitCounter) committed(id string) (hold bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	close(c.more)
	c.more = make(chan struct{})
	if !c.remote && c.hold > 0 && c.n >= c.hold {
		select {
		case c.held <- id:
		default:
		}
		return true
	}
	return false
}

func (c *commitCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// awaitHeld waits for the first held commit. exited, when not nil, is
// closed when the consumer process ended; output then returns what it
// wrote.
func (c *commitCounter) awaitHeld(e *env, exited <-chan struct{}, output func() string) string {
	e.t.Helper()
	select {
	case id := <-c.held:
		return id
	case <-exited:
		e.t.Fatalf("the consumer process ended before it held a commit (%d committed, holding from #%d); its output:\n%s", c.count(), c.hold, output())
	case <-time.After(e.target.Timeout):
		e.t.Fatalf("timed out after %v waiting for the consumer to commit its effect #%d (%d committed)", e.target.Timeout, c.hold, c.count())
	}
	return ""
}

// awaitCommits waits for n commits (exited and output as for awaitHeld).
func (c *commitCounter) awaitCommits(e *env, n int, exited <-chan struct{}, output func() string) {
	e.t.Helper()
	deadline := time.After(e.target.Timeout)
	for {
		c.mu.Lock()
		got, more := c.n, c.more
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-more:
		case <-exited:
			e.t.Fatalf("the consumer process ended after %d of the %d commits the scenario waited for; its output:\n%s", c.count(), n, output())
		case <-deadline:
			e.t.Fatalf("timed out after %v waiting for the consumer's commit #%d (%d committed)", e.target.Timeout, n, c.count())
		}
	}
}

// localVictim is an in-process consumer crashed by abandoning its
// connection (see scenarioInboxKill).
type localVictim struct {
	e  *env
	a  ports.Adapter
	c  *consumer
	cc *commitCounter
}

func (e *env) startInboxLocal(identity string, spec ports.SubscriptionSpec, db *sql.DB, hold int) *localVictim {
	e.t.Helper()
	v := &localVictim{e: e, a: e.dialAs(e.b.Addr, identity), cc: newCommitCounter(hold)}
	v.c = e.consumeInbox(v.a, spec, db, func(ctx context.Context, d *ports.Delivery) {
		if v.cc.committed(d.ID) {
			select { // held after the commit, before the ack, until the crash
			case <-v.cc.freed:
			case <-ctx.Done():
			}
		}
	})
	return v
}

func (v *localVictim) awaitHeld() string  { return v.cc.awaitHeld(v.e, nil, nil) }
func (v *localVictim) awaitCommits(n int) { v.cc.awaitCommits(v.e, n, nil, nil) }
func (v *localVictim) commits() int       { return v.cc.count() }

// lostReport is false: an in-process consumer's reports do not die with
// its crash.
func (v *localVictim) lostReport(string) bool { return false }
func (v *localVictim) crash(what string) {
	v.e.l.Mark(what)
	ctx, cancel := context.WithTimeout(v.e.ctx, v.e.target.Timeout)
	defer cancel()
	if err := v.a.Close(ctx); err != nil { // the broker takes back what it had not settled
		v.e.t.Logf("closing the crashed consumer's adapter: %v", err)
	}
	close(v.cc.freed) // the held handlers go on: their acks fail
	v.c.stop()
}
