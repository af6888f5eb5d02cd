package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow/rpc"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// The tests in this file prove the kit's own mechanisms: an adapter that
// loses a message, or reports a confirm it never got, must make a
// scenario FAIL — not pass, and not SKIP behind an excuse. Each runs one
// scenario of a deliberately broken target in a re-executed test binary
// (a failing scenario fails its test) and reads the verdict.

// mechanismEnv selects, in the re-executed binary, the broken target run.
const mechanismEnv = "SLUICE_FAULTS_MECHANISM"

// verdict runs scenario of the test named name in a re-executed test
// binary and returns its output and whether the scenario passed, failed
// or was skipped.
func verdict(t *testing.T, name, scenario string) (out, result string) {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIP: re-executes the test binary to run a failing scenario; not in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$/^"+scenario+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), mechanismEnv+"="+name)
	b, _ := cmd.CombinedOutput()
	out = string(b)
	for _, r := range []string{"FAIL", "SKIP", "PASS"} {
		if strings.Contains(out, "--- "+r+": "+name+"/"+scenario) {
			return out, r
		}
	}
	t.Fatalf("no verdict for %s/%s in the re-executed binary's output:\n%s", name, scenario, out)
	return out, ""
}

// mustFail checks that scenario of the broken target named name fails and
// that its output says why (want).
func mustFail(t *testing.T, name, scenario, want string) {
	t.Helper()
	out, r := verdict(t, name, scenario)
	if r != "FAIL" || !strings.Contains(out, want) {
		t.Fatalf("%s/%s: %s, want FAIL saying %q; output:\n%s", name, scenario, r, want, out)
	}
}

// inner reports whether this process is the re-executed binary running
// the broken target of t.
func inner(t *testing.T) bool { return os.Getenv(mechanismEnv) == t.Name() }

// broken is a mem adapter made to misbehave: its Send may report a
// message confirmed without storing it, its subscriptions may take a
// message from the broker (reporting its arrival) and never hand it on.
type broken struct {
	*mem.Adapter
	f *breakage
	// arrived is the kit's arrival hook (Target.Arrivals), or nil.
	arrived func(id string)
}

// breakage says what a broken adapter does wrong, shared by every adapter
// of one scenario.
type breakage struct {
	faulting atomic.Bool // set by the fake restart while it lasts
	// falseConfirm: Send drops the message and reports it confirmed.
	falseConfirm func(b *breakage, n int) bool
	// loseReceived: the subscription acks the delivery to the broker and
	// never hands it on.
	loseReceived func(b *breakage, n int) bool
	// dropReply: Send drops an rpc reply (a message with a correlation
	// id and no reply topic) and reports it confirmed.
	dropReply    func(b *breakage, corr string) bool
	subscribeErr error
	// storedDeadLetters: while failDeadLetters is set, a dead-letter
	// settlement publishes the copy and then reports a failure.
	storedDeadLetters bool
	failDeadLetters   atomic.Bool
	dropped           chan struct{} // one signal per message dropped or lost, dropped when full
	once              sync.Once
}

func (f *breakage) signal() {
	select {
	case f.dropped <- struct{}{}:
	default:
	}
}

func bodyN(payload []byte) int {
	var b struct{ N int }
	_ = json.Unmarshal(payload, &b)
	return b.N
}

func (a *broken) Send(ctx context.Context, msgs ...ports.Message) error {
	keep := msgs[:0:0]
	for _, m := range msgs {
		if a.f.falseConfirm != nil && a.f.falseConfirm(a.f, bodyN(m.Payload)) {
			a.f.signal()
			continue
		}
		if corr := m.Headers.Get(rpc.HeaderCorrelation); a.f.dropReply != nil && corr != "" && m.Headers.Get(rpc.HeaderReplyTo) == "" && a.f.dropReply(a.f, corr) {
			a.f.signal()
			continue
		}
		keep = append(keep, m)
	}
	if len(keep) == 0 {
		return nil
	}
	return a.Adapter.Send(ctx, keep...)
}

func (a *broken) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if a.f.subscribeErr != nil {
		return nil, a.f.subscribeErr
	}
	s, err := a.Adapter.Subscribe(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &brokenSub{Subscription: s, a: a, dlq: strings.HasSuffix(string(spec.Topic), ports.DeadLetterSuffix)}, nil
}

type brokenSub struct {
	ports.Subscription
	a   *broken
	dlq bool // a subscription of a dead-letter topic: loses nothing
}

func (s *brokenSub) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	if f := s.a.f; d.Action == ports.DeadLetter && f.failDeadLetters.Load() {
		if f.storedDeadLetters {
			for _, x := range ds {
				m := x.Message
				m.Topic = ports.DeadLetterTopic(m.Topic)
				if err := s.a.Adapter.Send(ctx, m); err != nil {
					return err
				}
			}
		}
		return errors.New("dead-letter publish reported failed by the broken adapter")
	}
	return s.Subscription.Settle(ctx, ds, d)
}

func (s *brokenSub) Receive(ctx context.Context, limit int) ([]*ports.Delivery, error) {
	for {
		ds, err := s.Subscription.Receive(ctx, limit)
		if err != nil {
			return ds, err
		}
		out := ds[:0:0]
		for _, d := range ds {
			if s.a.arrived != nil {
				s.a.arrived(d.ID)
			}
			if f := s.a.f; !s.dlq && f.loseReceived != nil && f.loseReceived(f, bodyN(d.Payload)) {
				_ = s.Subscription.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack})
				f.signal()
				continue
			}
			out = append(out, d)
		}
		if len(out) > 0 {
			return out, nil
		}
	}
}

// brokenTarget is a target of broken mem adapters whose "restart" lasts
// until the adapter dropped or lost a message (or a short while passed).
func brokenTarget(f *breakage, mod func(*faults.Broker)) faults.Target {
	f.dropped = make(chan struct{}, 1)
	var b *faults.Broker
	tg := faults.Target{
		Name:     "broken",
		Messages: 60,
		Timeout:  8 * time.Second,
		Arrivals: func(a ports.Adapter, arrived func(string)) { a.(*broken).arrived = arrived },
	}
	tg.Start = func(t *testing.T) *faults.Broker {
		mb, err := mem.NewBroker()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mb.Close(context.Background()) })
		b = &faults.Broker{
			Dial: func(context.Context, string) (ports.Adapter, error) {
				a, err := mem.New(mb)
				if err != nil {
					return nil, err
				}
				return &broken{Adapter: a, f: f}, nil
			},
			Restart: func(ctx context.Context) error {
				f.faulting.Store(true)
				defer f.faulting.Store(false)
				// The fault lasts a while (its subject, so that Send calls
				// overlap it), and until it did its damage.
				d := time.After(300 * time.Millisecond)
				select {
				case <-d:
				case <-ctx.Done():
				}
				select {
				case <-f.dropped:
				case <-time.After(2 * time.Second):
				case <-ctx.Done():
				}
				return nil
			},
			RestartNote:     "a fake restart of a broken mem adapter",
			FailDeadLetters: f.failDeadLetters.Store,
		}
		if mod != nil {
			mod(b)
		}
		return b
	}
	return tg
}

// duringFault makes the first message seen while the fault lasts the one
// dropped or lost.
func duringFault(b *breakage, _ int) bool {
	hit := false
	if b.faulting.Load() {
		b.once.Do(func() { hit = true })
	}
	return hit
}

const brokerDrop = "a broker loss the broken target claims"

// An adapter that takes a message off the broker inside the fault window
// and never hands it to the pipeline must FAIL the scenario, although the
// target claims a broker loss for it (BrokerDrops): the arrival hook saw
// the message reach the client.
func TestBrokerDropsDoNotExcuseAMessageTheClientReceived(t *testing.T) {
	tg := brokenTarget(&breakage{loseReceived: duringFault}, nil)
	tg.BrokerDrops = map[string]string{"broker-restart": brokerDrop}
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	mustFail(t, t.Name(), "broker-restart", "reached a client and the pipeline never settled it")
}

// A Send that reports a message confirmed without storing it, long before
// the fault, must FAIL the scenario: the excuse covers only messages sent
// inside a fault window.
func TestBrokerDropsDoNotExcuseAFalseConfirmBeforeTheFault(t *testing.T) {
	tg := brokenTarget(&breakage{falseConfirm: func(_ *breakage, n int) bool { return n == 3 }}, nil)
	tg.BrokerDrops = map[string]string{"broker-restart": brokerDrop}
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	mustFail(t, t.Name(), "broker-restart", "outside every fault window")
}

// Without arrivals nothing proves a message never reached the client: a
// loss inside the fault window must FAIL the scenario even where the
// target claims a broker loss.
func TestBrokerDropsNeedArrivals(t *testing.T) {
	tg := brokenTarget(&breakage{falseConfirm: duringFault}, nil)
	tg.BrokerDrops = map[string]string{"broker-restart": brokerDrop}
	tg.Arrivals = nil
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	mustFail(t, t.Name(), "broker-restart", "reports no arrivals")
}

// The excuse still applies where it should: a message that never reached
// any client, sent while the fault lasted, ends the scenario as a SKIP
// naming the broker's known loss.
func TestBrokerDropsExcuseAMessageThatNeverArrivedInTheWindow(t *testing.T) {
	tg := brokenTarget(&breakage{falseConfirm: duringFault}, nil)
	tg.BrokerDrops = map[string]string{"broker-restart": brokerDrop}
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	out, r := verdict(t, t.Name(), "broker-restart")
	if r != "SKIP" || !strings.Contains(out, "KNOWN BROKER LOSS "+brokerDrop) {
		t.Fatalf("%s, want SKIP naming the known loss; output:\n%s", r, out)
	}
}

// A false confirm inside a multi-message Send call, on a target with no
// excuse, fails the restart scenario with the message counted lost.
func TestFalseConfirmInABatchIsLost(t *testing.T) {
	tg := brokenTarget(&breakage{falseConfirm: func(b *breakage, n int) bool { return n >= 1_000_000 && duringFault(b, n) }}, nil)
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	mustFail(t, t.Name(), "broker-restart", "confirmed message(s) LOST")
}

// A connection fault that hits nothing proves nothing: an adapter that
// does not talk through the kit's proxy (as when an address rewrite
// breaks) must fail conn-reset, blackhole and stall.
func TestProxyFaultThatHitNothingFails(t *testing.T) {
	var mb *mem.Broker
	tg := faults.Target{
		Name:     "bypass",
		Messages: 60,
		Timeout:  8 * time.Second,
		Start: func(t *testing.T) *faults.Broker {
			var err error
			if mb, err = mem.NewBroker(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mb.Close(context.Background()) })
			return &faults.Broker{Addr: "127.0.0.1:9"} // never dialled
		},
		// Dial ignores addr: the proxy in front of the "broker" carries
		// nothing.
		Dial: func(context.Context, string, string) (ports.Adapter, error) { return mem.New(mb) },
	}
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	for _, s := range []string{"conn-reset", "blackhole", "stall"} {
		mustFail(t, t.Name(), s, "hit no connection of the consumer")
	}
}

// dlq-fail watches the dead-letter topic for the whole fault: a
// dead-letter publish that reports a failure but stored the copy must
// fail the scenario, however late the copy arrives.
func TestDLQFailCatchesACopyStoredDespiteAFailure(t *testing.T) {
	tg := brokenTarget(&breakage{storedDeadLetters: true}, nil)
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	mustFail(t, t.Name(), "dlq-fail", "reached the dead-letter topic")
}

// A loss prints what the broker holds (Broker.Backlog), so that a message
// the broker still keeps can be told from one it never had.
func TestLossPrintsWhatTheBrokerHolds(t *testing.T) {
	tg := brokenTarget(&breakage{falseConfirm: duringFault}, func(b *faults.Broker) {
		b.Backlog = func(context.Context) (string, error) { return "brokenq classic 0 0", nil }
	})
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	mustFail(t, t.Name(), "broker-restart", "brokenq classic 0 0")
}

// A replier whose replies Sender reports a reply confirmed and drops it
// must FAIL rpc-restart naming the lost reply: its call is retried and
// answered, but the confirmed reply never reached the client.
func TestRPCConfirmedReplyDroppedIsLost(t *testing.T) {
	tg := brokenTarget(&breakage{dropReply: func(b *breakage, _ string) bool { return duringFault(b, 0) }}, nil)
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	mustFail(t, t.Name(), "rpc-restart", "never reached the client, correlation ids [")
}

// The same target without the defect passes rpc-restart: the check
// fails on a lost reply, not on the fault itself.
func TestRPCRestartPassesWithoutDefect(t *testing.T) {
	tg := brokenTarget(&breakage{}, nil)
	if inner(t) {
		faults.Run(t, tg)
		return
	}
	out, r := verdict(t, t.Name(), "rpc-restart")
	if r != "PASS" || !strings.Contains(out, "RPC broken rpc-restart ") || !strings.Contains(out, " lost=0 ") {
		t.Fatalf("%s, want PASS with an RPC line saying lost=0; output:\n%s", r, out)
	}
}
