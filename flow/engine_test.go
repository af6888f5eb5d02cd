package flow_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// gatedFake wraps fakeAdapter: it records the size of every Settle call,
// can hold Settle calls until released, and is a ports.Flusher that
// records when it was flushed relative to Stop.
type gatedFake struct {
	*fakeAdapter
	mu      sync.Mutex
	calls   []int          // deliveries per Settle call, in call order
	gate    chan struct{}  // when non-nil, Settle waits for it to close
	entered chan int       // receives the size of each call as it starts
	events  []string       // "flush", "stop"
	reject  string         // a Settle call that carries this id fails whole
	flushed map[string]int // deliveries settled before Flush was called
	running int            // Settle calls in progress
	overlap int            // most Settle calls in progress at once
}

func newGated() *gatedFake {
	return &gatedFake{fakeAdapter: newFake(), entered: make(chan int, 1024)}
}

func (g *gatedFake) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if _, err := g.fakeAdapter.Subscribe(ctx, spec); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *gatedFake) hold() { g.mu.Lock(); g.gate = make(chan struct{}); g.mu.Unlock() }

func (g *gatedFake) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gatedFake) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	g.mu.Lock()
	g.calls = append(g.calls, len(ds))
	gate, reject := g.gate, g.reject
	g.running++
	g.overlap = max(g.overlap, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	g.entered <- len(ds)
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, x := range ds {
		if reject != "" && x.ID == reject {
			return fmt.Errorf("delivery %s is from a lost channel: %w", x.ID, ports.ErrClosed)
		}
	}
	return g.fakeAdapter.Settle(ctx, ds, d)
}

func (g *gatedFake) Flush(context.Context) error {
	g.mu.Lock()
	g.events = append(g.events, "flush")
	g.mu.Unlock()
	return nil
}

func (g *gatedFake) Stop(ctx context.Context) error {
	g.mu.Lock()
	g.events = append(g.events, "stop")
	g.mu.Unlock()
	return g.fakeAdapter.Stop(ctx)
}

func (g *gatedFake) callSizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.calls...)
}

// waitEntered waits for the next Settle call to start and returns its size.
func (g *gatedFake) waitEntered(t *testing.T) int {
	t.Helper()
	select {
	case n := <-g.entered:
		return n
	case <-time.After(5 * time.Second):
		t.Fatalf("no Settle call started within 5s (calls so far %v)", g.callSizes())
		return 0
	}
}

func startGated(t *testing.T, g *gatedFake, sp ports.SubscriptionSpec, build func(*flow.Pipeline), opts ...flow.Option) *flow.Pipeline {
	t.Helper()
	return startOn(t, g, g, sp, build, opts...)
}

// startOn is startGated on a, an adapter that reaches g (eagerFake).
func startOn(t *testing.T, g *gatedFake, a ports.Adapter, sp ports.SubscriptionSpec, build func(*flow.Pipeline), opts ...flow.Option) *flow.Pipeline {
	t.Helper()
	p := flow.New(a, sp, opts...)
	build(p)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		g.open()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return p
}

func deliveries(n int) []*ports.Delivery {
	ds := make([]*ports.Delivery, n)
	for i := range ds {
		ds[i] = delivery(fmt.Sprintf(`{"id":"o%d","total":1}`, i), 0)
	}
	return ds
}

// A handler is never held up by a slow settlement: while the first Settle
// call is blocked, the single sink worker goes on handling every delivery
// the in-flight limit lets in, and their ACKs coalesce into one later call.
func TestSlowSettleDoesNotBlockTheHandler(t *testing.T) {
	const inFlight = 8
	g := newGated()
	g.hold()
	handled := make(chan string, 64)
	sp := spec
	sp.InFlight = inFlight
	startGated(t, g, sp, sinkOrders(func(_ context.Context, o order) error {
		handled <- o.ID
		return nil
	}), flow.WithSettleLinger(time.Hour), flow.WithSettleConcurrency(1))
	g.push(deliveries(inFlight)...)
	for i := range inFlight {
		select {
		case <-handled:
		case <-time.After(5 * time.Second):
			t.Fatalf("handled %d of %d deliveries while Settle was blocked: the handler waits for settlement", i, inFlight)
		}
	}
	first := g.waitEntered(t)
	g.open()
	got := g.waitSettled(t, inFlight)
	if len(got) != inFlight {
		t.Fatalf("settled %d, want %d", len(got), inFlight)
	}
	// With one call at a time, what completed while the first call was
	// blocked goes in the next call; only the last delivery, handled but
	// perhaps not yet completed when the gate opened, may need a third.
	total := 0
	for _, n := range g.callSizes() {
		total += n
	}
	if calls := g.callSizes(); total != inFlight || len(calls) > 3 {
		t.Fatalf("Settle calls %v (the first of %d): want the %d deliveries in at most 3 calls", calls, first, inFlight)
	}
}

// The in-flight slot of a delivery is given back only when its Settle call
// returned: with every slot waiting for a blocked settlement, nothing more
// is received. (The adapter is one whose Settle waits for the broker, so
// that every round's call can be held at once; a deferring adapter's ACK
// calls run one at a time and must not block.)
func TestSlotsAreReleasedOnlyWhenSettleReturns(t *testing.T) {
	const inFlight = 4
	g := newGated()
	g.hold()
	sp := spec
	sp.InFlight = inFlight
	p := startOn(t, g, eagerFake{g}, sp, sinkOrders(func(context.Context, order) error { return nil }))
	g.push(deliveries(3 * inFlight)...)
	total := 0
	for total < inFlight {
		total += g.waitEntered(t)
	}
	if st := p.Stats(); st.Received != inFlight || st.InFlight != inFlight {
		t.Fatalf("with %d settlements blocked: stats %+v, want exactly %d received and in flight", inFlight, st, inFlight)
	}
	g.mu.Lock()
	maxOut := g.maxOut
	g.mu.Unlock()
	if maxOut > inFlight {
		t.Fatalf("adapter handed out %d unsettled deliveries, limit %d", maxOut, inFlight)
	}
	g.open()
	g.waitSettled(t, 3*inFlight)
}

// A batch (flow.Join of the pipeline's deliveries) is settled with exactly
// one Settle call carrying every member.
func TestBatchSettlesWithOneCall(t *testing.T) {
	const size = 50
	g := newGated()
	sp := spec
	sp.InFlight = size
	startGated(t, g, sp, func(p *flow.Pipeline) {
		batches := flow.Operate(p.Source(), func(ctx context.Context, in <-chan flow.Item[*ports.Delivery], out chan<- flow.Item[[]*ports.Delivery]) error {
			var (
				ds []*ports.Delivery
				cs []*flow.Completion
			)
			for it := range in {
				ds, cs = append(ds, it.Value), append(cs, it.Completion)
				if len(ds) == size {
					out <- flow.Item[[]*ports.Delivery]{Ctx: ctx, Value: ds, Completion: flow.Join(cs...)}
					ds, cs = nil, nil
				}
			}
			return nil
		})
		flow.Sink(batches, func(context.Context, []*ports.Delivery) error { return nil })
	})
	g.push(deliveries(size)...)
	got := g.waitSettled(t, size)
	if calls := g.callSizes(); len(calls) != 1 || calls[0] != size {
		t.Fatalf("a batch of %d was settled with calls %v, want one call of %d", size, calls, size)
	}
	for _, s := range got {
		if s.disp.Action != ports.Ack {
			t.Fatalf("member %s settled %v, want ACK", s.id, s.disp.Action)
		}
	}
}

// A failed batch is settled with one call per redelivery count (each count
// has its own backoff and attempt number).
func TestFailedBatchSettlesOneCallPerRedeliveryCount(t *testing.T) {
	g := newGated()
	sp := spec
	sp.InFlight = 6
	startGated(t, g, sp, func(p *flow.Pipeline) {
		batches := flow.Operate(p.Source(), func(ctx context.Context, in <-chan flow.Item[*ports.Delivery], out chan<- flow.Item[int]) error {
			var cs []*flow.Completion
			for it := range in {
				cs = append(cs, it.Completion)
				if len(cs) == 6 {
					out <- flow.Item[int]{Ctx: ctx, Value: 6, Completion: flow.Join(cs...)}
					cs = nil
				}
			}
			return nil
		})
		flow.Sink(batches, func(context.Context, int) error { return errTransient })
	})
	var ds []*ports.Delivery
	for i := range 6 {
		ds = append(ds, delivery(`{}`, i%2))
	}
	g.push(ds...)
	got := g.waitSettled(t, 6)
	calls := g.callSizes()
	if len(calls) != 2 || calls[0]+calls[1] != 6 {
		t.Fatalf("calls %v: want two calls of 3 (redelivery counts 0 and 1)", calls)
	}
	for _, s := range got {
		if s.disp.Action != ports.Requeue {
			t.Fatalf("member %s settled %v, want REQUEUE", s.id, s.disp.Action)
		}
	}
}

// A lone delivery is settled at once, whatever the linger: nothing else is
// being handled, so there is nothing to wait for.
func TestLoneDeliverySettlesWithoutWaitingOutTheLinger(t *testing.T) {
	g := newGated()
	startGated(t, g, spec, sinkOrders(func(context.Context, order) error { return nil }), flow.WithSettleLinger(time.Hour))
	g.push(deliveries(1)...)
	g.waitSettled(t, 1)
}

// A full round is settled without waiting out the linger.
func TestFullRoundSettlesWithoutWaitingOutTheLinger(t *testing.T) {
	g := newGated()
	sp := spec
	sp.InFlight = 16
	release := make(chan struct{})
	startGated(t, g, sp, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
			if d.ID == "last" {
				<-release // keeps one delivery in hand, so the round is not idle
			}
			return nil
		}, flow.Workers(2))
	}, flow.WithSettleLinger(time.Hour), flow.WithSettleBatch(4))
	last := delivery(`{}`, 0)
	last.ID = "last"
	g.push(last)
	g.push(deliveries(8)...)
	g.waitSettled(t, 8)
	close(release)
	g.waitSettled(t, 9)
}

// Stop settles what completed before it, then flushes the adapter's
// deferred settlements, then stops the subscription — in that order.
func TestStopFlushesAcceptedCompletionsThenFlushesThenStops(t *testing.T) {
	g := newGated()
	sp := spec
	sp.InFlight = 4
	p := flow.New(g, sp, flow.WithSettleLinger(time.Hour))
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.push(deliveries(4)...)
	g.waitSettled(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	g.mu.Lock()
	events := fmt.Sprint(g.events)
	g.mu.Unlock()
	if events != "[flush stop]" {
		t.Fatalf("adapter saw %s, want [flush stop]", events)
	}
	if st := p.Stats(); st.Acked != 4 || st.InFlight != 0 {
		t.Fatalf("stats %+v, want 4 acked, none in flight", st)
	}
}

// Conflicting outcomes are still refused and never settled twice.
func TestEngineKeepsConflictsUnsettled(t *testing.T) {
	g := newGated()
	reported := make(chan error, 16)
	startGated(t, g, spec, func(p *flow.Pipeline) {
		none := flow.Via(p.Source(), func(it flow.Item[*ports.Delivery], _ flow.Emit[int]) {
			_ = it.Succeed()
			_ = it.Fail(ports.Poisonf("late poison"))
		})
		flow.Sink(none, func(context.Context, int) error { return nil })
	}, flow.WithErrorHandler(func(err error) { reported <- err }))
	g.push(deliveries(3)...)
	got := g.waitSettled(t, 3)
	for _, s := range got {
		if s.disp.Action != ports.Ack {
			t.Fatalf("settled %v, want ACK only", s.disp.Action)
		}
	}
	// A delivery's ACK may be carried out before its handler gets to the
	// conflicting second outcome: wait for the three reports.
	for i := range 3 {
		select {
		case err := <-reported:
			if !errors.Is(err, ports.ErrConflict) {
				t.Fatalf("reported %v, want a conflict", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("reported %d conflicts within 5s, want 3", i)
		}
	}
	if s := g.settlements(); len(s) != 3 {
		t.Fatalf("settled %d times, want 3 (a conflict settles nothing)", len(s))
	}
}

// Coalescing never changes an outcome: when a round of independent ACKs
// fails because the adapter cannot settle one of them (a delivery of a lost
// channel), the others are settled on their own and only that one is
// reported.
func TestFailedRoundIsSplitSoOneBadDeliveryDoesNotFailTheOthers(t *testing.T) {
	g := newGated()
	g.hold()
	sp := spec
	sp.InFlight = 8
	var mu sync.Mutex
	var reported []error
	handled := make(chan struct{}, 8)
	startGated(t, g, sp, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { handled <- struct{}{}; return nil })
	}, flow.WithSettleConcurrency(1), flow.WithSettleLinger(time.Hour),
		flow.WithErrorHandler(func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }))
	first := deliveries(1)
	g.push(first...)
	g.waitEntered(t) // the first call is held; what completes now coalesces
	rest := deliveries(4)
	g.mu.Lock()
	g.reject = rest[1].ID
	g.mu.Unlock()
	g.push(rest...)
	// Wait until all five are handled: the four behind the held call
	// then wait for the next round together.
	for i := range 5 {
		select {
		case <-handled:
		case <-time.After(5 * time.Second):
			t.Fatalf("handled %d of 5 deliveries", i)
		}
	}
	g.open()
	got := g.waitSettled(t, 4) // the first and the three good ones
	ids := map[string]bool{}
	for _, s := range got {
		ids[s.id] = true
	}
	if ids[rest[1].ID] || len(ids) != 4 {
		t.Fatalf("settled %v: want every delivery but %s", ids, rest[1].ID)
	}
	mu.Lock()
	defer mu.Unlock()
	var se *flow.SettleError
	if len(reported) != 1 || !errors.As(reported[0], &se) || se.ID != rest[1].ID {
		t.Fatalf("reported %v: want one SettleError for %s", reported, rest[1].ID)
	}
}

// eagerFake is gatedFake without Flush: an adapter whose Settle waits for
// the broker (it defers nothing). The embedded interface hides Flush.
type eagerFake struct{ waiting }

type waiting interface {
	ports.Adapter
	ports.Subscription
}

func (e eagerFake) Subscribe(ctx context.Context, sp ports.SubscriptionSpec) (ports.Subscription, error) {
	if _, err := e.waiting.Subscribe(ctx, sp); err != nil {
		return nil, err
	}
	return e, nil
}

// settleOverlap starts a pipeline on a (rounds of one delivery, four
// calls at once), holds the first Settle call and pushes another delivery.
// It reports whether a second call started, within wait, while the first
// was held.
func settleOverlap(t *testing.T, g *gatedFake, a ports.Adapter, wait time.Duration) bool {
	t.Helper()
	g.hold()
	p := flow.New(a, spec, flow.WithSettleLinger(time.Hour), flow.WithSettleBatch(1), flow.WithSettleConcurrency(4))
	handled := make(chan struct{}, 2)
	sinkOrders(func(context.Context, order) error { handled <- struct{}{}; return nil })(p)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		g.open()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	g.push(deliveries(1)...)
	g.waitEntered(t)
	g.push(deliveries(1)...)
	for range 2 {
		select {
		case <-handled:
		case <-time.After(5 * time.Second):
			t.Fatal("the handler did not get both deliveries within 5s while a Settle call was held")
		}
	}
	select {
	case <-g.entered:
		return true
	case <-time.After(wait):
		return false
	}
}

// An adapter that defers its acknowledgements (ports.Flusher) has its ACK
// rounds carried out on the engine's own goroutine, one call at a time; an
// adapter whose Settle waits for the broker gets concurrent calls (up to
// WithSettleConcurrency), so one slow round does not hold up the next.
func TestDeferredAcksRunOnTheEngineOtherSettlementsConcurrently(t *testing.T) {
	g := newGated()
	// 200ms bounds a check that nothing starts while the first call is
	// held; the overlap count below catches a call that starts later.
	if settleOverlap(t, g, g, 200*time.Millisecond) {
		t.Fatal("a second ACK call of a ports.Flusher adapter started while the first was running: deferred ACKs run on the engine's goroutine, one at a time")
	}
	if got := g.waitSettled(t, 2); len(got) != 2 {
		t.Fatalf("settled %d deliveries, want 2", len(got))
	}
	g.mu.Lock()
	overlap := g.overlap
	g.mu.Unlock()
	if overlap != 1 {
		t.Fatalf("%d ACK calls of a ports.Flusher adapter ran at once, want 1", overlap)
	}
	e := newGated()
	if !settleOverlap(t, e, eagerFake{e}, 5*time.Second) {
		t.Fatal("no second Settle call started while the first was held: an adapter that waits for the broker must get concurrent calls")
	}
}

// On an adapter whose Settle waits for the broker, the completions that
// gathered while the only Settle call was running go in the next call as
// soon as it returns (the worker that made the call carries the round out
// itself), never more calls at once than the concurrency allows, and a
// round with requeues among its ACKs is settled in full too.
func TestRoundGatheredDuringACallGoesWhenItReturns(t *testing.T) {
	for _, c := range []struct {
		name        string
		concurrency int
		failEvery   int // 0: every delivery succeeds
	}{
		{"acks/concurrency=1", 1, 0},
		{"acks/concurrency=2", 2, 0},
		{"acks-and-requeues/concurrency=1", 1, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			const inFlight = 8
			g := newGated()
			g.hold()
			sp := spec
			sp.InFlight = inFlight
			sp.Retry = ports.RetryPolicy{MaxAttempts: 5, NoBackoff: true}
			var n int
			var mu sync.Mutex
			startOn(t, g, eagerFake{g}, sp, sinkOrders(func(context.Context, order) error {
				mu.Lock()
				defer mu.Unlock()
				n++
				if c.failEvery > 0 && n%c.failEvery == 0 {
					return errTransient
				}
				return nil
			}), flow.WithSettleLinger(time.Hour), flow.WithSettleConcurrency(c.concurrency))
			g.push(deliveries(inFlight)...)
			g.waitEntered(t) // the first round's call, held: the others gather
			g.open()
			got := g.waitSettled(t, inFlight)
			acks, requeues := 0, 0
			for _, s := range got {
				switch s.disp.Action {
				case ports.Ack:
					acks++
				case ports.Requeue:
					requeues++
				}
			}
			wantRequeues := 0
			if c.failEvery > 0 {
				wantRequeues = inFlight / c.failEvery
			}
			if len(got) != inFlight || requeues != wantRequeues || acks != inFlight-wantRequeues {
				t.Fatalf("settled %d (%d acks, %d requeues), want %d (%d requeues)", len(got), acks, requeues, inFlight, wantRequeues)
			}
			g.mu.Lock()
			overlap := g.overlap
			g.mu.Unlock()
			if overlap > c.concurrency {
				t.Fatalf("%d Settle calls ran at once, concurrency %d", overlap, c.concurrency)
			}
		})
	}
}

// carrierFake is a gatedFake whose receive carries the ACKs recorded
// since the last one (ports.AckCarrier, as Redis's does): each Receive
// records how many deliveries were handed out and not settled when it
// began.
type carrierFake struct {
	*gatedFake
	carries bool
	unacked []int // per Receive call, in call order
}

func (c *carrierFake) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if _, err := c.gatedFake.Subscribe(ctx, spec); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *carrierFake) CarriesAcks() bool { return c.carries }

func (c *carrierFake) Receive(ctx context.Context, limit int) ([]*ports.Delivery, error) {
	c.fakeAdapter.mu.Lock()
	out := c.fakeAdapter.out
	c.fakeAdapter.mu.Unlock()
	c.mu.Lock()
	c.unacked = append(c.unacked, out)
	c.mu.Unlock()
	return c.gatedFake.Receive(ctx, limit)
}

// A subscription whose receive carries its ACKs gets the ACKs of every
// delivery its receive loop handled before the loop's next receive, in one
// Settle call per receive, however much of the window is free: the read
// that follows sends them and gets their slots back, as a raw client
// acknowledges what it read with its next read.
func TestReceiveCarryingAcksFindsThePreviousReceiveSettled(t *testing.T) {
	c := &carrierFake{gatedFake: newGated(), carries: true}
	sp := spec
	sp.InFlight = 100 // receives of 10 leave most of it free
	startOn(t, c.gatedFake, c, sp, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	}, flow.WithSettleLinger(time.Hour))
	for i := range 3 {
		c.push(deliveries(10)...)
		c.waitSettled(t, 10*(i+1))
	}
	c.mu.Lock()
	unacked := append([]int(nil), c.unacked...)
	c.mu.Unlock()
	if len(unacked) < 3 {
		t.Fatalf("%d receives for 3 pushes of 10 deliveries, want at least 3", len(unacked))
	}
	for i, n := range unacked {
		if n != 0 {
			t.Fatalf("receive %d began with %d deliveries handed out and not settled (per receive: %v): a carrier's receive must find the previous receive's deliveries settled", i, n, unacked)
		}
	}
	if sizes := c.callSizes(); !slices.Equal(sizes, []int{10, 10, 10}) {
		t.Fatalf("Settle calls of %v deliveries, want one call per receive of 10: [10 10 10]", sizes)
	}
}
