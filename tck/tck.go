// Package tck is sluice's technology compatibility kit: one broker-neutral
// contract suite that every adapter must pass against a real broker.
//
//	func TestTCK(t *testing.T) {
//		tck.Run(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
//			return newHarness(ctx, t)
//		})
//	}
//
// Run executes the sixteen cases of the settlement contract (SPEC §5), the
// Broadcast instance collision, the Port cases (declared topics, start
// positions, single-active groups, QoS, tenant scopes, adopted topologies,
// payload limits; numbered from 20), request/reply and per-member batch
// outcomes (30, 31), dead-letter redrive (32, 33), a foreign producer's
// message (34), a requeue kept in its group (35), share-group settlement
// (36), the exactly-once transform (37) and the headers a value-only
// pipeline reads (38) as behaviour-named subtests, each with a fresh
// Harness.
// A case is skipped only when the adapter's declared Capabilities say it
// cannot apply, and the skip names the capability.
//
// # Timing
//
// Cases wait for what they expect with bounded waits (Options.Timeout) and
// fail with a message naming what did not arrive. Proving that something
// does NOT happen (no redelivery after an ack) needs a quiet window
// (Options.Quiet) after a positive marker; that window is the only place
// the kit waits on time alone, besides the delay, expiry and retention
// cases, whose subject is time.
package tck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Options tune the kit for a broker. Zero fields take the defaults.
type Options struct {
	// Timeout bounds every wait for an expected delivery. Default 20s.
	Timeout time.Duration
	// Quiet is how long the kit watches for an unexpected (re)delivery
	// before concluding there is none. Default 500ms.
	Quiet time.Duration
	// InstanceTTL is the TTL used by the instance-expiry case (brokers with
	// second granularity need ≥ 1s). Default 1s.
	InstanceTTL time.Duration
	// Delay is the message delay used by the delay case. Default 500ms.
	Delay time.Duration
	// Retention is the topic retention used by TopicRetention (the case
	// waits twice as long). Default 1s; brokers that expire coarsely need
	// more.
	Retention time.Duration
	// MaxPayload bounds the payload OversizedPayloadRefused sends and
	// expects delivered (the refused one, one byte above the limit, is
	// allocated but never written). Default 16 MiB.
	MaxPayload int
	// Extra runs adapter-specific checks after the kit's cases, each with a
	// fresh harness (the escape hatch).
	Extra map[string]func(t *testing.T, h Harness)
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Second
	}
	if o.Quiet <= 0 {
		o.Quiet = 500 * time.Millisecond
	}
	if o.InstanceTTL <= 0 {
		o.InstanceTTL = time.Second
	}
	if o.Delay <= 0 {
		o.Delay = 500 * time.Millisecond
	}
	if o.Retention <= 0 {
		o.Retention = time.Second
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = 16 << 20
	}
	return o
}

// Run runs the whole kit with default options.
func Run(t *testing.T, newHarness NewHarness) { RunWith(t, newHarness, Options{}) }

// RunWith runs the whole kit.
func RunWith(t *testing.T, newHarness NewHarness, opts Options) {
	opts = opts.withDefaults()
	for _, c := range cases {
		c.runSubtest(t, newHarness, opts)
	}
	for name, extra := range opts.Extra {
		t.Run("Extra/"+name, func(t *testing.T) {
			k := newKit(t, newHarness, opts)
			extra(t, k.h)
		})
	}
}

// SecureTransportCases are the cases every adapter runs over each secured
// transport (TLS, with its authentication) besides its plain TCK run: a
// round trip, LOAD_BALANCE between two instances, and a dead letter. They
// prove that the whole path (publish, consume, settle, dead-letter
// publish) works over that connection. Run them with [RunCases].
var SecureTransportCases = []string{
	"RoundTrip_PayloadAndEnvelopeIntact",
	"LoadBalance_EachMessageHandledByExactlyOneInstance",
	"Poison_DeadLetteredOnlyAfterConfirmedPublish",
}

// CaseNames returns the names of every case of the kit, in SPEC §5 order.
func CaseNames() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	return out
}

// RunCases runs only the named cases (see [CaseNames] and
// [SecureTransportCases]), each as a subtest with a fresh harness, as
// RunWith does. An unknown name fails t, naming the cases there are.
func RunCases(t *testing.T, newHarness NewHarness, opts Options, names ...string) {
	t.Helper()
	if len(names) == 0 {
		t.Fatalf("tck.RunCases: no case named (the cases: %s)", strings.Join(CaseNames(), ", "))
	}
	opts = opts.withDefaults()
	for _, name := range names {
		i := slices.IndexFunc(cases, func(c tckCase) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("tck.RunCases: no case %q (the cases: %s)", name, strings.Join(CaseNames(), ", "))
		}
		cases[i].runSubtest(t, newHarness, opts)
	}
}

// runSubtest runs c as a subtest of t with a fresh kit, skipped when the
// adapter's capabilities say it cannot apply.
func (c tckCase) runSubtest(t *testing.T, newHarness NewHarness, opts Options) {
	t.Run(c.name, func(t *testing.T) {
		k := newKit(t, newHarness, opts)
		if c.needs != nil {
			if why := c.needs(k.caps); why != "" {
				t.Skipf("SKIP by capability: adapter %q %s", k.name, why)
			}
		}
		c.run(k)
	})
}

type tckCase struct {
	num   int // the case's number in SPEC §5, for ordering
	name  string
	needs func(ports.Capabilities) string // "" when the case applies
	run   func(k *kit)
}

// cases is the kit, in SPEC §5 order; each file adds its own.
var cases []tckCase

func register(num int, name string, needs func(ports.Capabilities) string, run func(k *kit)) {
	i := 0
	for i < len(cases) && cases[i].num < num {
		i++
	}
	cases = slices.Insert(cases, i, tckCase{num: num, name: name, needs: needs, run: run})
}

// kit is one subtest's fixture: a harness, its adapters, a unique topic.
type kit struct {
	t     *testing.T
	h     Harness
	opts  Options
	ctx   context.Context
	topic ports.Topic
	group string
	name  string
	caps  ports.Capabilities
	first ports.Adapter
}

func newKit(t *testing.T, newHarness NewHarness, opts Options) *kit {
	ctx, cancel := context.WithTimeout(context.Background(), 10*opts.Timeout)
	t.Cleanup(cancel)
	h, err := newHarness(ctx, t)
	if err != nil {
		t.Fatalf("making harness: %v", err)
	}
	t.Cleanup(h.Close)
	suffix := randHex(4)
	caseName := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name()))
	if i := strings.LastIndex(caseName, "-"); len(caseName) > 40 && i > 0 {
		caseName = caseName[len(caseName)-40:]
	}
	k := &kit{t: t, h: h, opts: opts, ctx: ctx,
		topic: ports.Topic("tck." + strings.Trim(caseName, "-.") + "." + suffix),
		group: "g" + suffix,
	}
	k.first = k.adapter()
	k.name = k.first.Name()
	k.caps = k.first.Capabilities()
	return k
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// adapter makes a new adapter instance, closed at the end of the subtest.
func (k *kit) adapter() ports.Adapter {
	k.t.Helper()
	a, err := k.h.MakeAdapter(k.ctx)
	if err != nil {
		k.t.Fatalf("MakeAdapter: %v", err)
	}
	k.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			k.t.Errorf("closing adapter: %v", err)
		}
	})
	return a
}

// spec returns a LOAD_BALANCE spec of the kit's topic and group with
// short, deterministic retry pacing.
func (k *kit) spec() ports.SubscriptionSpec {
	return ports.SubscriptionSpec{
		Topic: k.topic, Group: k.group, InFlight: 16,
		Retry: ports.RetryPolicy{MaxAttempts: 10, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
	}
}

// sendUnrouted sends one message to a topic that may have no subscription
// at the moment: an adapter may refuse it with ports.ErrNoSubscriber
// (nothing stored) or accept and drop it, as an exchange with no binding
// does. It returns the message's id.
func (k *kit) sendUnrouted(a ports.Adapter) string {
	k.t.Helper()
	m, err := flow.NewMessage(k.ctx, k.topic, payload{})
	if err != nil {
		k.t.Fatal(err)
	}
	id := ports.NewID()
	m.Headers.Set(ports.HeaderID, id)
	if err := a.Send(k.ctx, m); err != nil && !errors.Is(err, ports.ErrNoSubscriber) {
		k.t.Fatalf("Send 1 message: %v", err)
	}
	return id
}

// send sends n JSON messages {"n": i} and returns their ids in order.
func (k *kit) send(a ports.Adapter, n int, opts ...flow.MessageOption) []string {
	k.t.Helper()
	ids := make([]string, n)
	msgs := make([]ports.Message, n)
	for i := range n {
		m, err := flow.NewMessage(k.ctx, k.topic, payload{N: i}, opts...)
		if err != nil {
			k.t.Fatal(err)
		}
		ids[i] = ports.NewID()
		m.Headers.Set(ports.HeaderID, ids[i])
		msgs[i] = m
	}
	if err := a.Send(k.ctx, msgs...); err != nil {
		k.t.Fatalf("Send %d messages: %v", n, err)
	}
	return ids
}

type payload struct {
	N    int    `json:"n"`
	Text string `json:"text,omitempty"`
}

// received is one delivery seen by a kit consumer.
type received struct {
	d   *ports.Delivery
	ctx context.Context
	at  time.Time
}

// consumer is a running pipeline whose handler reports every delivery.
type consumer struct {
	k    *kit
	p    *flow.Pipeline
	got  chan received
	errs chan error
	once sync.Once
}

// consume starts a pipeline on a with spec; handle decides each outcome
// (nil: succeed). The pipeline is stopped at the end of the subtest.
func (k *kit) consume(a ports.Adapter, spec ports.SubscriptionSpec, handle func(ctx context.Context, d *ports.Delivery) error, opts ...flow.Option) *consumer {
	k.t.Helper()
	return k.consumeOn(a, spec, spec.WithDefaults().InFlight, handle, opts...)
}

// consumeOn is consume with the number of handler goroutines.
func (k *kit) consumeOn(a ports.Adapter, spec ports.SubscriptionSpec, workers int, handle func(ctx context.Context, d *ports.Delivery) error, opts ...flow.Option) *consumer {
	k.t.Helper()
	c := &consumer{k: k, got: make(chan received, 4096), errs: make(chan error, 256)}
	opts = append([]flow.Option{flow.WithErrorHandler(func(err error) {
		select {
		case c.errs <- err:
		default:
		}
	}), flow.WithDrainTimeout(0)}, opts...)
	c.p = flow.New(a, spec, opts...)
	flow.Sink(c.p.Source(), func(ctx context.Context, d *ports.Delivery) error {
		c.got <- received{d: d, ctx: ctx, at: time.Now()}
		if handle == nil {
			return nil
		}
		return handle(ctx, d)
	}, flow.Workers(workers))
	if err := c.p.Start(k.ctx); err != nil {
		k.t.Fatalf("starting consumer of %s: %v", spec.Topic, err)
	}
	k.t.Cleanup(func() { c.stop() })
	return c
}

// stop stops the consumer at once: in-flight work is cancelled, not acked.
func (c *consumer) stop() {
	c.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.p.Stop(ctx); err != nil && !abandoned(err) {
			c.k.t.Errorf("stopping consumer: %v", err)
		}
	})
}

// next waits for the next delivery.
func (c *consumer) next(what string) received {
	c.k.t.Helper()
	select {
	case r := <-c.got:
		return r
	case <-time.After(c.k.opts.Timeout):
		c.k.t.Fatalf("timed out after %v waiting for %s (stats %+v)", c.k.opts.Timeout, what, c.p.Stats())
	}
	return received{}
}

// collect waits for n deliveries.
func (c *consumer) collect(n int, what string) []received {
	c.k.t.Helper()
	out := make([]received, 0, n)
	for len(out) < n {
		out = append(out, c.next(fmt.Sprintf("%s (%d of %d)", what, len(out)+1, n)))
	}
	return out
}

// quiet fails if a delivery arrives within the quiet window.
func (c *consumer) quiet(what string) {
	c.k.t.Helper()
	select {
	case r := <-c.got:
		c.k.t.Fatalf("unexpected delivery of %s (redelivery count %d): %s", r.d.ID, r.d.RedeliveryCount, what)
	case <-time.After(c.k.opts.Quiet):
	}
}

// waitStats waits until cond holds on the pipeline's stats.
func (c *consumer) waitStats(what string, cond func(flow.Stats) bool) flow.Stats {
	c.k.t.Helper()
	deadline := time.Now().Add(c.k.opts.Timeout)
	for {
		s := c.p.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			c.k.t.Fatalf("timed out after %v waiting for %s; stats %+v", c.k.opts.Timeout, what, s)
		}
		time.Sleep(2 * time.Millisecond) // polling counters, bounded by the deadline
	}
}

func ids(rs []received) map[string]int {
	m := map[string]int{}
	for _, r := range rs {
		m[r.d.ID]++
	}
	return m
}
