package faults

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// Target describes one adapter and its broker to the kit.
type Target struct {
	// Name is the adapter's name in LEDGER lines.
	Name string
	// Start starts a broker for one scenario, stopped at t's cleanup (or
	// connects to a shared one). It may skip or fail t.
	Start func(t *testing.T) *Broker
	// Dial makes a new adapter — a new "process" — connected to the broker
	// at addr ("127.0.0.1:port": Broker.Addr, or a Proxy in front of it).
	// identity names the process: every adapter gets a fresh one, except
	// one that replaces a stopped or killed process, which gets that
	// process's identity (adapters whose broker keeps state per client,
	// such as an MQTT session, use it as their client identity; others
	// ignore it). The kit closes every adapter it makes. The consumer
	// process of the consumer-kill scenario calls Dial too, in a
	// re-executed test binary, so Dial must not depend on state made by
	// Start. Not used when Broker.Dial is set.
	Dial func(ctx context.Context, addr, identity string) (ports.Adapter, error)
	// Position reads a delivery's broker position from its Facts, for the
	// ledger's duplicate windows (tck.Ledger.SetPosition). Optional.
	Position func(*ports.Delivery) string
	// IgnoreLeaks lists goroutines the broker's client leaves behind by
	// design; the leak check after every scenario ignores them.
	IgnoreLeaks []goleak.Option
	// BroadcastLeaks lists goroutines the broker's client leaves behind
	// after a Broadcast subscription was stopped (an upstream bug; say
	// which): the leak check of the scenarios that stop one (the rpc
	// client's reply subscription in rpc-restart and rpc-reset) ignores
	// them too, the other scenarios' do not.
	BroadcastLeaks []goleak.Option
	// Messages is the number of messages per scenario. Default 200.
	Messages int
	// SoakMessages is the number of messages of the soak. Default 100000.
	SoakMessages int
	// Timeout bounds every wait of a scenario. Default 60s.
	Timeout time.Duration
	// Skip names scenarios not to run, each with the reason printed in
	// the skip (for a known adapter or broker bug, say which). They run
	// anyway when SLUICE_FAULTS_RUN_SKIPPED is set.
	Skip map[string]string
	// Deferred reports whether a Settle error means the adapter keeps the
	// settlement and carries it out itself later (tck.Ledger.SetDeferred):
	// such messages count as deferred in the LEDGER line, not as lost.
	// Optional; say in the adapter's test which documented behaviour it
	// stands for.
	Deferred func(error) bool
	// BrokerDrops names scenarios in which the broker itself is known to
	// drop confirmed messages before delivering them, with the reason. A
	// loss there ends the scenario as a SKIP naming the reason (with its
	// LEDGER line) only when every lost message is proven never to have
	// reached any client of the scenario (Arrivals is required: without
	// it nothing is excused) and was first sent inside the fault's window:
	// from the send of the newest message a client had received when the
	// fault began, to the first arrival at a client of a message sent
	// after the fault healed. Any other loss still fails it — a message the client
	// received and the pipeline never saw, one confirmed long before the
	// fault, one sent after the flow resumed.
	BrokerDrops map[string]string
	// Arrivals, when set, makes adapter a report the message id
	// (ports.HeaderID) of every message its connection receives, before
	// the adapter handles it, by calling arrived (from any goroutine). The
	// kit calls it on every adapter it makes, before subscribing. It is
	// what lets BrokerDrops tell a message the broker never delivered
	// from one the adapter dropped.
	Arrivals func(adapter ports.Adapter, arrived func(id string))
	// ClientRace, when set, describes a data race inside the broker's
	// client library that a producer reconnecting while it sends
	// triggers. Under -race the kit then keeps producers off the faulted
	// connections (proxy scenarios cut only the consumer's) and skips
	// broker-restart, printing ClientRace; without -race it changes
	// nothing. Say which upstream bug it is.
	ClientRace string
}

func (t Target) withDefaults() Target {
	if t.Messages <= 0 {
		t.Messages = 200
	}
	if t.SoakMessages <= 0 {
		t.SoakMessages = 100_000
	}
	if t.Timeout <= 0 {
		t.Timeout = 60 * time.Second
	}
	return t
}

// RunSkippedEnv names an environment variable: when set, Run runs the
// scenarios that Target.Skip names too (to reproduce a known bug).
const RunSkippedEnv = "SLUICE_FAULTS_RUN_SKIPPED"

// Broker is one running broker and the faults it can be put through. A nil
// hook means the fault is not available: its scenario is skipped and says
// so.
type Broker struct {
	// Addr is the broker's "127.0.0.1:port"; "" for an in-process broker,
	// which has no connection to cut and no other process to kill.
	Addr string
	// Dial makes a new adapter on an in-process broker (replaces
	// Target.Dial; identity as there).
	Dial func(ctx context.Context, identity string) (ports.Adapter, error)
	// RewriteAddr says the broker advertises Addr to its clients (a Pulsar
	// lookup), so a Proxy must rewrite it to keep them on the proxy.
	RewriteAddr bool
	// Proxy, when set, is a proxy the broker already sits behind and
	// advertises to its clients (a Kafka broker's metadata names the
	// proxy's address): the connection scenarios fault it instead of
	// making their own. Addr is then the proxy's address too, and Start
	// closes the proxy at t's cleanup.
	Proxy *Proxy
	// Restart restarts the broker with its stored messages kept and
	// returns once it serves again (or fails).
	Restart func(ctx context.Context) error
	// RestartNote says what Restart really does when it is not a full
	// process restart (printed with the scenario's ledger).
	RestartNote string
	// RestartTimeout bounds Restart. Default 4 minutes: a broker restart
	// beside a CPU hog can take minutes (RabbitMQ's stop_app and start_app
	// took longer than the scenario timeout), and the kit checks what
	// happens around the restart, not how fast the broker boots.
	RestartTimeout time.Duration
	// Backlog, when set, says what the broker holds now (its queues and
	// their message counts): printed when confirmed messages are lost, so
	// that a loss can be told from messages no consumer was given.
	Backlog func(ctx context.Context) (string, error)
	// FailDeadLetters makes dead-letter publishes fail (true) or succeed
	// again (false).
	FailDeadLetters func(fail bool)
	// FailSends makes publishes go unconfirmed (true) or confirmed again
	// (false). The broker may still store an unconfirmed publish.
	FailSends func(fail bool)
	// FailSendsNote says what FailSends does on this broker.
	FailSendsNote string
	// FailSendsReconnects: the client reconnects its producer when sends
	// go unconfirmed (a send timeout closes the connection), so with a
	// Target.ClientRace the kit skips send-unconfirmed under -race, as it
	// does broker-restart; the test script runs it without -race.
	FailSendsReconnects bool
}

// scenario is one fault.
type scenario struct {
	name  string
	needs func(b *Broker, t Target) string // "" when it applies
	run   func(e *env)
	// broadcast: the scenario stops a Broadcast subscription
	// (Target.BroadcastLeaks applies).
	broadcast bool
}

var scenarios []scenario

func register(name string, needs func(*Broker, Target) string, run func(*env)) {
	scenarios = append(scenarios, scenario{name: name, needs: needs, run: run})
}

func always(*Broker, Target) string { return "" }

func networked(b *Broker, t Target) string {
	switch {
	case b.Addr == "":
		return "in-process broker: no network connection to cut"
	case t.Dial == nil:
		return "the target has no Dial to connect through a proxy"
	}
	return ""
}

// Run runs every scenario against target, each as a subtest with its own
// broker, ledger and leak check. In a consumer process re-executed by the
// consumer-kill scenario it runs that consumer instead, until killed.
func Run(t *testing.T, target Target) {
	if os.Getenv(childEnv) != "" {
		runChild(t, target)
		return
	}
	target = target.withDefaults()
	runPath := t.Name()
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			if why, ok := target.Skip[s.name]; ok {
				if os.Getenv(RunSkippedEnv) == "" {
					t.Skipf("SKIP %s/%s: %s (run it anyway with %s=1)", target.Name, s.name, why, RunSkippedEnv)
				}
				t.Logf("running %s/%s although Target.Skip says: %s", target.Name, s.name, why)
			}
			if s.name == "soak" && !soakEnabled {
				t.Skipf("SKIP %s/soak: the soak runs only with -tags soak (go test -tags soak -run '%s/soak' -timeout 60m -v <this package>)", target.Name, runPath)
			}
			leakCheck(t, target, s.broadcast)
			b := target.Start(t)
			if why := s.needs(b, target); why != "" {
				t.Skipf("SKIP %s/%s: %s", target.Name, s.name, why)
			}
			e := newEnv(t, target, b, s.name)
			e.runPath = runPath
			s.run(e)
		})
	}
}

// leakCheck registers, first so that it runs last, a check that the
// scenario left no goroutine behind.
func leakCheck(t *testing.T, target Target, broadcast bool) {
	opts := append(slices.Clone(target.IgnoreLeaks), goleak.IgnoreCurrent())
	if broadcast {
		opts = append(opts, target.BroadcastLeaks...)
	}
	t.Cleanup(func() {
		if err := goleak.Find(opts...); err != nil {
			t.Errorf("goroutines leaked after %s: %v", t.Name(), err)
		}
	})
}

// ledgerFor makes the scenario's ledger.
func ledgerFor(target Target, fault string) *tck.Ledger {
	l := tck.NewLedger(target.Name, fault)
	if target.Position != nil {
		l.SetPosition(target.Position)
	}
	if target.Deferred != nil {
		l.SetDeferred(target.Deferred)
	}
	return l
}

// withTimeout is a context bounded by the target's timeout.
func withTimeout(parent context.Context, target Target) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, target.Timeout)
}
