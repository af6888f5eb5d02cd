package faults

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// The inbox-kill scenario re-executes the test binary with childEnv set
// to childInbox: the consumer process runs the scenario's exactly-once
// pipeline (inboxPipeline) into the effects database at childDBEnv, and
// writes one line per event to stdout:
//
//	SLUICE-CHILD READY
//	SLUICE-CHILD GOT <id> <quoted position>     a delivery arrived
//	SLUICE-CHILD COMMIT <id>                    its effect and inbox record committed
//	SLUICE-CHILD HELD <id>                      ... and it is held there, before the ack
//	SLUICE-CHILD DUP <id>                       acked without an effect: the inbox suppressed it
//	SLUICE-CHILD SETTLED <id> <action>          settled (ports.Action as a number)
//	SLUICE-CHILD FAILED <id> <deferred>         the settlement failed (Target.Deferred's word)
//	SLUICE-CHILD UNSETTLED <id>                 ended without a settlement
//
// From its childHoldEnv-th commit on (0: never) it holds every commit
// before its ack until it is killed.
const (
	childInbox   = "inbox"
	childDBEnv   = "SLUICE_FAULTS_DB"
	childHoldEnv = "SLUICE_FAULTS_HOLD"
)

// runInboxChild is the inbox-kill scenario's consumer process.
func runInboxChild(t *testing.T, target Target) {
	say := childOutput()
	hold, err := strconv.Atoi(os.Getenv(childHoldEnv))
	if err != nil {
		t.Fatalf("child: %s: %v", childHoldEnv, err)
	}
	ctx := context.Background()
	a, err := target.Dial(ctx, os.Getenv(childAddrEnv), os.Getenv(childIdentityEnv))
	if err != nil {
		t.Fatalf("child: dial: %v", err)
	}
	db, err := openEffects(ctx, os.Getenv(childDBEnv))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	position := func(d *ports.Delivery) string {
		if target.Position == nil {
			return ""
		}
		return target.Position(d)
	}
	var received sync.Map
	cc := newCommitCounter(hold)
	p, err := inboxPipeline(ctx, a, inboxSpec(ports.Topic(os.Getenv(childTopicEnv)), os.Getenv(childGroupEnv)), db, inboxHooks{
		observe: func(ev flow.Event) {
			d := ev.Delivery
			if d == nil {
				return
			}
			if ev.Received {
				received.Store(d, struct{}{})
				say("GOT %s %q", d.ID, position(d))
				return
			}
			if _, ok := received.LoadAndDelete(d); !ok { // abandoned before the pipeline emitted it
				say("GOT %s %q", d.ID, position(d))
			}
			switch {
			case ev.Action != 0:
				say("SETTLED %s %d", d.ID, int(ev.Action))
			case ev.Err != nil:
				say("FAILED %s %t", d.ID, target.Deferred != nil && target.Deferred(ev.Err))
			default:
				say("UNSETTLED %s", d.ID)
			}
		},
		committed: func(_ context.Context, d *ports.Delivery) {
			say("COMMIT %s", d.ID)
			if cc.committed(d.ID) {
				say("HELD %s", d.ID)
				select {} // after the commit, before the ack, until SIGKILL
			}
		},
		suppressed: func(d *ports.Delivery) { say("DUP %s", d.ID) },
	}, flow.WithErrorHandler(func(error) {}))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatalf("child: start: %v", err)
	}
	say("READY")
	select {} // until SIGKILL (or stdin closes)
}

// inboxChild is an inbox-kill consumer process, its lines recorded in
// the ledger as they come.
type inboxChild struct {
	e    *env
	ch   *child
	cc   *commitCounter
	db   *sql.DB         // the effects, for crash
	done <-chan struct{} // every line read, the process gone

	mu        sync.Mutex
	open      map[string]int  // deliveries without an outcome, per id
	committed map[string]bool // ... whose effect committed (COMMIT), so their ack may have been sent
	held      map[string]bool // ... held after the commit (HELD): their ack was certainly not sent
	// unknown are the deliveries crash found open with their effect
	// committed: acked or not, the report died with the process.
	unknown map[string]bool
}

// startInboxChild starts a consumer process playing identity that holds
// its commits from the hold-th on (0: never).
func (e *env) startInboxChild(identity string, spec ports.SubscriptionSpec, db *sql.DB, dbPath string, hold int) *inboxChild {
	e.t.Helper()
	c := &inboxChild{e: e, cc: newCommitCounter(hold), db: db, open: map[string]int{}, committed: map[string]bool{}, held: map[string]bool{}}
	c.cc.remote = true
	c.ch = e.startChild(e.b.Addr, identity, spec, childEnv+"="+childInbox, childDBEnv+"="+dbPath, childHoldEnv+"="+strconv.Itoa(hold))
	if l := c.ch.next(e, "the exactly-once consumer process to subscribe"); l != "READY" {
		e.t.Fatalf("consumer process said %q, want READY", l)
	}
	c.done = c.ch.each(c.line)
	return c
}

// line records one line of the consumer process.
func (c *inboxChild) line(line string) {
	l := c.e.l
	if id, pos, ok := parseGot(line); ok {
		l.Delivered(id, pos)
		c.mu.Lock()
		c.open[id]++
		c.mu.Unlock()
		return
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return
	}
	id := f[1]
	ended := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.open[id]--; c.open[id] <= 0 {
			delete(c.open, id)
			delete(c.committed, id)
			delete(c.held, id)
		}
	}
	switch {
	case f[0] == "COMMIT":
		c.mu.Lock()
		c.committed[id] = true
		c.mu.Unlock()
		c.cc.committed(id)
	case f[0] == "HELD":
		c.mu.Lock()
		c.held[id] = true
		c.mu.Unlock()
		select {
		case c.cc.held <- id:
		default:
		}
	case f[0] == "DUP":
		l.Suppressed(id)
	case f[0] == "SETTLED" && len(f) == 3:
		n, _ := strconv.Atoi(f[2])
		ended()
		l.Settled(id, ports.Action(n))
	case f[0] == "FAILED" && len(f) == 3:
		ended()
		l.SettleFailed(id, f[2] == "true")
	case f[0] == "UNSETTLED":
		ended()
		l.Unsettled(id)
	}
}

func (c *inboxChild) awaitHeld() string  { return c.cc.awaitHeld(c.e, c.done, c.ch.output) }
func (c *inboxChild) awaitCommits(n int) { c.cc.awaitCommits(c.e, n, c.done, c.ch.output) }
func (c *inboxChild) commits() int       { return c.cc.count() }

func (c *inboxChild) lostReport(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unknown[id]
}

// crash SIGKILLs the process and records that the deliveries it held
// died with it. Those whose effect was committed, by this process (it
// reported the commit) or an earlier one (the inbox then suppresses the
// delivery and acks it at once), and that it did not hold after a commit
// may have been acked an instant before the kill, with the report of it
// lost (DiedAfterEffect); the others were certainly not acked (Died).
func (c *inboxChild) crash(what string) {
	c.e.t.Helper()
	c.e.l.Mark(what)
	c.ch.kill(c.e)
	<-c.done
	c.mu.Lock()
	var died, maybeAcked []string
	for id, n := range c.open {
		effected := c.committed[id]
		if !effected && !c.held[id] {
			err := c.db.QueryRowContext(c.e.ctx, `SELECT EXISTS (SELECT 1 FROM `+effectsTable+` WHERE msg = ?)`, id).Scan(&effected)
			if err != nil {
				c.mu.Unlock()
				c.e.t.Fatalf("reading the effect of %s after the kill: %v", id, err)
			}
		}
		for range n {
			if effected && !c.held[id] {
				maybeAcked = append(maybeAcked, id)
			} else {
				died = append(died, id)
			}
		}
	}
	c.open, c.committed, c.held = map[string]int{}, map[string]bool{}, map[string]bool{}
	c.unknown = map[string]bool{}
	for _, id := range maybeAcked {
		c.unknown[id] = true
	}
	c.mu.Unlock()
	c.e.l.Died(died...)
	c.e.l.DiedAfterEffect(maybeAcked...)
	c.e.t.Logf("killed an exactly-once consumer process (pid %d, %s) holding %d delivery(ies), %d of them with their effect committed and not held after it (acked or not: unknown); %d effect(s) committed by it",
		c.ch.cmd.Process.Pid, what, len(died)+len(maybeAcked), len(maybeAcked), c.cc.count())
}
