package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// env is one scenario's fixture: a broker, a ledger, a unique topic and
// group, and the adapters, proxies, consumers and producers it made (all
// closed at the end of the scenario, before the ledger is checked).
type env struct {
	t      *testing.T
	target Target
	b      *Broker
	fault  string
	ctx    context.Context
	topic  ports.Topic
	group  string
	l      *tck.Ledger
	w      *witness
	delays *delays // the stream's requeue-once messages and delayed sends
	// runPath is the name of the test that called Run, for re-executing
	// the test binary as a consumer process.
	runPath string

	mu        sync.Mutex
	consumers []*consumer
	procs     map[ports.Adapter]process
	processes int
	// knownBug: the scenario ended as a skip naming Target.BrokerDrops.
	knownBug bool

	errMu    sync.Mutex
	errCount int
	errFirst []string
}

func newEnv(t *testing.T, target Target, b *Broker, fault string) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 5*target.Timeout)
	suffix := randHex(4)
	e := &env{
		t: t, target: target, b: b, fault: fault, ctx: ctx,
		topic:  ports.Topic("faults." + fault + "." + suffix),
		group:  "g" + suffix,
		l:      ledgerFor(target, fault),
		w:      newWitness(target.Arrivals != nil),
		delays: newDelays(),
		procs:  map[ports.Adapter]process{},
	}
	// Registered before anything the scenario makes, so it runs after all
	// of it was stopped and closed.
	t.Cleanup(func() {
		cancel()
		e.errMu.Lock()
		if e.errCount > 0 {
			t.Logf("%d error(s) reported by the pipelines during %s (expected under faults), first: %q", e.errCount, fault, e.errFirst)
		}
		e.errMu.Unlock()
		if e.knownBug {
			e.l.Record(t)
			return
		}
		if r := e.l.Report(); r.Lost > 0 {
			if e.b.Backlog != nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				held, err := e.b.Backlog(ctx)
				cancel()
				t.Logf("with %d confirmed message(s) lost, the broker holds (err %v):\n%s", r.Lost, err, held)
			}
			if dl := e.l.OnDeadLetterTopic(e.l.LostIDs()); len(dl) > 0 {
				t.Logf("%d lost message(s) are on the dead-letter topic although no dead-letter settlement of theirs was reported done, "+
					"and the original never came back: the broker carried out a settlement the adapter reported failed (e.g. %v)", len(dl), dl[:min(len(dl), 5)])
			}
		}
		e.l.Check(t)
	})
	return e
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// onError collects the errors pipelines report.
func (e *env) onError(err error) {
	e.errMu.Lock()
	defer e.errMu.Unlock()
	e.errCount++
	if len(e.errFirst) < 3 {
		e.errFirst = append(e.errFirst, err.Error())
	}
}

// identity returns a fresh process identity.
func (e *env) identity() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.processes++
	return fmt.Sprintf("p%s-%d", e.group, e.processes)
}

// dial makes an adapter at addr playing a fresh process, closed at the
// end of the scenario.
func (e *env) dial(addr string) ports.Adapter {
	e.t.Helper()
	return e.dialAs(addr, e.identity())
}

// dialAs makes an adapter at addr playing the process named identity.
func (e *env) dialAs(addr, identity string) ports.Adapter {
	e.t.Helper()
	var a ports.Adapter
	var err error
	if e.b.Dial != nil {
		a, err = e.b.Dial(e.ctx, identity)
	} else {
		a, err = e.target.Dial(e.ctx, addr, identity)
	}
	if err != nil {
		e.t.Fatalf("making a %s adapter at %q: %v", e.target.Name, addr, err)
	}
	if e.target.Arrivals != nil {
		e.target.Arrivals(a, e.w.arrival)
	}
	e.mu.Lock()
	e.procs[a] = process{addr: addr, identity: identity}
	e.mu.Unlock()
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.target.Timeout)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			e.t.Logf("closing a %s adapter after %s: %v", e.target.Name, e.fault, err)
		}
	})
	return a
}

// process is where an adapter connects and which process it plays.
type process struct{ addr, identity string }

// adapter makes an adapter connected to the broker directly.
func (e *env) adapter() ports.Adapter { return e.dial(e.b.Addr) }

// replace makes an adapter playing the process of c's adapter again (a
// restart of that process), connected to the broker directly.
func (e *env) replace(c *consumer) ports.Adapter { return e.dialAs(e.b.Addr, c.proc.identity) }

// proxy puts a new Proxy in front of the broker, closed at the end.
func (e *env) proxy() *Proxy {
	e.t.Helper()
	var p *Proxy
	var err error
	if e.b.RewriteAddr {
		p, err = NewRewritingProxy(e.b.Addr)
	} else {
		p, err = NewProxy(e.b.Addr)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Close)
	return p
}

// spec is a LoadBalance spec of the scenario's topic and group with short
// retry pacing.
func (e *env) spec() ports.SubscriptionSpec {
	return ports.SubscriptionSpec{
		Topic: e.topic, Group: e.group, InFlight: 16,
		Retry: ports.RetryPolicy{MaxAttempts: 5, Backoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
	}
}

// consumer is a running pipeline recorded by the ledger.
type consumer struct {
	e    *env
	p    *flow.Pipeline
	spec ports.SubscriptionSpec
	proc process
	once sync.Once
}

// consume starts a pipeline of spec on a whose handler is h on
// spec.InFlight workers, recorded by the scenario's ledger. It is stopped
// at the end of the scenario at the latest.
func (e *env) consume(a ports.Adapter, spec ports.SubscriptionSpec, h func(context.Context, *ports.Delivery) error) *consumer {
	e.t.Helper()
	return e.consumeOn(a, spec, spec.WithDefaults().InFlight, h)
}

// consumeOn is consume with the number of handler goroutines.
func (e *env) consumeOn(a ports.Adapter, spec ports.SubscriptionSpec, workers int, h func(context.Context, *ports.Delivery) error) *consumer {
	e.t.Helper()
	return e.start(a, spec, workers, h, e.l.Observer())
}

// start is consumeOn recorded by observe (the ledger's Observer, or its
// DeadLetterObserver for a consumer of the dead-letter topic).
func (e *env) start(a ports.Adapter, spec ports.SubscriptionSpec, workers int, h func(context.Context, *ports.Delivery) error, observe flow.Option) *consumer {
	e.t.Helper()
	all := []flow.Option{observe, flow.WithErrorHandler(e.onError), flow.WithDrainTimeout(2 * time.Second), flow.WithSettleTimeout(10 * time.Second)}
	c := &consumer{e: e, spec: spec, p: flow.New(a, spec, all...)}
	e.mu.Lock()
	c.proc = e.procs[a]
	e.consumers = append(e.consumers, c)
	e.mu.Unlock()
	flow.Sink(c.p.Source(), h, flow.Workers(workers))
	if err := c.p.Start(e.ctx); err != nil {
		e.t.Fatalf("starting a consumer of %s: %v", spec.Topic, err)
	}
	e.t.Cleanup(c.stop)
	return c
}

// dlq consumes the dead-letter topic with h (nil: succeed), recording
// arrivals only.
func (e *env) dlq(a ports.Adapter, h func(context.Context, *ports.Delivery) error) *consumer {
	sp := e.spec()
	sp.Topic = ports.DeadLetterTopic(e.topic)
	sp.Group = e.group + "-dlq"
	if h == nil {
		h = ok
	}
	return e.start(a, sp, sp.WithDefaults().InFlight, h, e.l.DeadLetterObserver())
}

// stop stops the consumer, letting in-flight work finish for a moment.
func (c *consumer) stop() {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.e.target.Timeout)
		defer cancel()
		if err := c.p.Stop(ctx); err != nil {
			c.e.t.Logf("stopping a consumer after %s: %v", c.e.fault, err)
		}
	})
}

// body is the payload of the kit's messages.
type body struct {
	N       int   `json:"n"`
	SentAt  int64 `json:"sent_at"` // unix nanoseconds
	Poison  bool  `json:"poison,omitempty"`
	Requeue bool  `json:"requeue,omitempty"` // the stream's handler fails its first delivery
}

// message builds message i of the scenario.
func (e *env) message(i int, poison bool) ports.Message {
	return e.messageOf(body{N: i, Poison: poison})
}

// messageOf builds the message of b, stamped with the time it is sent.
func (e *env) messageOf(b body) ports.Message {
	b.SentAt = time.Now().UnixNano()
	p, _ := json.Marshal(b)
	return ports.Message{Topic: e.topic, Payload: p, Headers: ports.NewHeaders(
		ports.HeaderID, e.l.NewID(),
		ports.HeaderContentType, "application/json",
	)}
}

// sendTimeout bounds each send of the kit's producers: a send still
// unconfirmed then is retried (with the same id).
const sendTimeout = 5 * time.Second

// producer sends messages one at a time, retrying each unconfirmed one
// with the same id until it is confirmed.
type producer struct {
	done    chan struct{}
	quit    chan struct{} // closed at the end of the scenario: stop retrying
	retries atomic.Int64
	retried chan struct{} // one signal per retry, dropped when full
	batches *batcher      // the batch producer beside it (stream), or nil
	err     error
}

// produce starts a producer of n messages made by mk, pausing every
// between sends (the pace of the stream, not synchronisation).
func (e *env) produce(a ports.Sender, n int, every time.Duration, mk func(i int) ports.Message) *producer {
	p := &producer{done: make(chan struct{}), quit: make(chan struct{}), retried: make(chan struct{}, 64)}
	go func() {
		defer close(p.done)
		for i := range n {
			if err := e.sendRetrying(a, mk(i), p); err != nil {
				p.err = err
				return
			}
			if every > 0 {
				select {
				case <-time.After(every):
				case <-p.quit:
					p.err = errStopped
					return
				case <-e.ctx.Done():
					p.err = e.ctx.Err()
					return
				}
			}
		}
	}()
	// A scenario that ended early (failed, or skipped on proof) stops it.
	e.t.Cleanup(func() { close(p.quit); <-p.done })
	return p
}

func (e *env) sendRetrying(a ports.Sender, m ports.Message, p *producer) error {
	e.w.sent(m.Headers.Get(ports.HeaderID))
	for {
		ctx, cancel := context.WithTimeout(e.ctx, sendTimeout)
		e.delays.sent(m)
		err := e.l.Send(ctx, a, m)
		cancel()
		switch {
		case err == nil:
			return nil
		case e.ctx.Err() != nil:
			return e.ctx.Err()
		case errors.Is(err, ports.ErrClosed), errors.Is(err, ports.ErrInvalid):
			return err
		}
		p.retries.Add(1)
		select {
		case p.retried <- struct{}{}:
		default:
		}
		select {
		case <-time.After(20 * time.Millisecond): // retry pacing
		case <-p.quit:
			return errStopped
		case <-e.ctx.Done():
			return e.ctx.Err()
		}
	}
}

// errStopped: the scenario ended while a producer still retried.
var errStopped = errors.New("faults: the scenario ended while the producer still retried")

// wait waits for the producer to finish and fails the scenario if it
// could not send everything.
func (p *producer) wait(e *env) {
	e.t.Helper()
	ctx, cancel := withTimeout(e.ctx, e.target)
	defer cancel()
	select {
	case <-p.done:
	case <-ctx.Done():
		e.t.Fatalf("producer still sending after %v", e.target.Timeout)
	}
	if p.err != nil {
		e.t.Fatalf("producer: %v", p.err)
	}
}

// await waits for cond on the ledger, failing the scenario after the
// target's timeout.
func (e *env) await(what string, cond func(tck.Counts) bool) {
	e.t.Helper()
	ctx, cancel := withTimeout(e.ctx, e.target)
	defer cancel()
	if err := e.l.Await(ctx, what, cond); err != nil {
		e.t.Fatal(err)
	}
}

// settled waits until every confirmed message was acked or dead-lettered.
func (e *env) settled() {
	e.t.Helper()
	e.await("every confirmed message acked or dead-lettered", func(c tck.Counts) bool { return c.Settled == c.Confirmed })
}

// settleAll waits until every confirmed message was settled. If some
// are still unsettled once settlements stopped (awaitSettling) it
// restarts every consumer of the scenario's topic, as an operator would: a message the
// adapter left unsettled must then be redelivered. It fails the scenario
// if that does not settle everything either.
func (e *env) settleAll(h func(context.Context, *ports.Delivery) error) {
	e.t.Helper()
	err := e.settleRestarting("consumer-restart", "the consumers", "message(s)", func() {
		e.mu.Lock()
		var old []*consumer
		for _, c := range e.consumers {
			if c.spec.Topic == e.topic {
				old = append(old, c)
			}
		}
		e.mu.Unlock()
		for _, c := range old {
			c.stop()
		}
		for _, c := range old {
			e.consume(e.replace(c), c.spec, h)
		}
	})
	if err != nil {
		e.skipIfBrokerDropped()
		e.t.Fatalf("after restarting the consumers: %v", err)
	}
}

// settleRestarting waits until every confirmed message was settled; if
// settlements stop before, it marks the ledger, calls restart (who: the
// consumers it restarts, what: their messages) and waits again. What is
// still unsettled then is an error, unless it is only messages whose
// settlement was in doubt (its answer lost): the restarted consumers were
// not given them again, so the broker applied the settlement; that is
// logged.
func (e *env) settleRestarting(mark, who, what string, restart func()) error {
	err := e.awaitSettling()
	if err == nil {
		return nil
	}
	e.t.Logf("%v; restarting %s so that unsettled %s are redelivered", err, who, what)
	e.l.Mark(mark)
	restart()
	if err = e.awaitSettling(); err == nil {
		return nil
	}
	if c := e.l.Counts(); c.InDoubt > 0 && c.Settled+c.Deferred+c.InDoubt >= c.Confirmed {
		e.t.Logf("%d %s whose settlement was in doubt were not redelivered after %s restarted: the broker applied it", c.InDoubt, what, who)
		return nil
	}
	return err
}

// awaitSettling waits until every confirmed message was settled, for as
// long as settlements go on: it gives up once a quarter of the target's
// timeout (at most 10 s) passed without one, or the scenario's bound ran
// out. A backlog drained slowly (a loaded machine) is waited for; a stuck
// one is not.
func (e *env) awaitSettling() error {
	window := min(e.target.Timeout/4, 10*time.Second)
	for {
		before := e.l.Counts().Settled
		ctx, cancel := context.WithTimeout(e.ctx, window)
		err := e.l.AwaitSettled(ctx)
		cancel()
		if err == nil || e.ctx.Err() != nil || e.l.Counts().Settled == before {
			return err
		}
	}
}

// skipIfBrokerDropped ends the scenario as a skip naming
// Target.BrokerDrops when every lost message is proven never to have
// reached a client and was first sent inside a fault window (see
// BrokerDrops); otherwise it logs why the loss is not excused and returns.
func (e *env) skipIfBrokerDropped() {
	reason := e.target.BrokerDrops[e.fault]
	lost := e.l.LostIDs()
	if reason == "" || len(lost) == 0 {
		return
	}
	if why := e.w.droppedInWindow(lost); why != "" {
		e.t.Logf("not excused as %s's known broker loss: %s", e.target.Name, why)
		return
	}
	e.knownBug = true
	e.t.Skipf("KNOWN BROKER LOSS %s: %d confirmed message(s) that never reached a client, each sent inside a fault window (%s), e.g. %v",
		reason, len(lost), e.w.describe(), lost[:min(len(lost), 5)])
}

// ok is a handler that succeeds.
func ok(context.Context, *ports.Delivery) error { return nil }
