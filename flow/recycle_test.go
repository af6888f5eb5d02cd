package flow_test

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// recyclingFake is fakeAdapter whose subscription takes deliveries back
// (ports.Recycler). It records which and overwrites each one, as a reused
// delivery is overwritten by the next message: run with -race, a read of
// a recycled delivery by the pipeline shows up.
type recyclingFake struct {
	*fakeAdapter
	rmu      sync.Mutex
	recycled map[string]bool // by the id the delivery had
}

func newRecyclingFake() *recyclingFake {
	return &recyclingFake{fakeAdapter: newFake(), recycled: map[string]bool{}}
}

func (r *recyclingFake) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if _, err := r.fakeAdapter.Subscribe(ctx, spec); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *recyclingFake) Recycle(ds []*ports.Delivery) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	for _, d := range ds {
		r.recycled[d.ID] = true
		*d = ports.Delivery{ID: "reused", Message: ports.Message{Headers: ports.NewHeaders(ports.HeaderRequestID, "someone-else")}}
	}
}

func (r *recyclingFake) recycledIDs() map[string]bool {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	out := map[string]bool{}
	for id := range r.recycled {
		out[id] = true
	}
	return out
}

// runRecycling runs build over a recyclingFake, pushes ds, waits for
// their settlements and stops the pipeline (so that every recycling is
// done), and returns the ids recycled.
func runRecycling(t *testing.T, build func(*flow.Pipeline), ds []*ports.Delivery, opts ...flow.Option) map[string]bool {
	t.Helper()
	r := newRecyclingFake()
	p := flow.New(r, spec, opts...)
	build(p)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	r.push(ds...)
	r.waitSettled(t, len(ds))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	return r.recycledIDs()
}

// A pipeline whose stages hand handlers decoded values only gives its
// acknowledged deliveries back to a subscription that reuses them; a
// requeued or dead-lettered one stays the broker's and the adapter's.
func TestValueOnlyPipelineRecyclesAcknowledgedDeliveries(t *testing.T) {
	good := []*ports.Delivery{delivery(`{"id":"a","total":1}`, 0), delivery(`{"id":"b","total":2}`, 0), delivery(`{"id":"c","total":0}`, 0)}
	poison := delivery(`{not json`, 0)
	failing := delivery(`{"id":"fail","total":9}`, 0)
	var ids []string // read now: the recycled ones are overwritten
	for _, d := range good {
		ids = append(ids, d.ID)
	}
	poisonID, failingID := poison.ID, failing.ID
	got := runRecycling(t, func(p *flow.Pipeline) {
		kept := flow.Filter(flow.Decode[order](p.Source()), func(_ context.Context, o order) (bool, error) { return o.Total > 0, nil })
		doubled := flow.Map(kept, func(_ context.Context, o order) (order, error) { o.Total *= 2; return o, nil })
		flow.Sink(doubled, func(_ context.Context, o order) error {
			if o.ID == "fail" {
				return errors.New("transient")
			}
			return nil
		})
	}, append(good, poison, failing))
	for _, id := range ids { // "c" was filtered out: acknowledged too
		if !got[id] {
			t.Errorf("acknowledged delivery %s was not recycled (recycled: %v)", id, got)
		}
	}
	if got[poisonID] || got[failingID] || len(got) != len(ids) {
		t.Errorf("recycled %v: want only the acknowledged %d", got, len(good))
	}
}

// Where a handler is given the delivery, its item or its completion, or
// an observer sees deliveries, nothing is recycled: they may be kept past
// the settlement (see TestKeptAfterSettlementStayTheirOwn).
func TestPipelinesThatShowDeliveriesRecycleNothing(t *testing.T) {
	sinkNothing := func(context.Context, order) error { return nil }
	cases := map[string]struct {
		build func(*flow.Pipeline)
		opts  []flow.Option
	}{
		"sink on the source": {build: func(p *flow.Pipeline) {
			flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
		}},
		"map on the source": {build: func(p *flow.Pipeline) {
			flow.Sink(flow.Map(p.Source(), func(_ context.Context, d *ports.Delivery) (string, error) { return d.ID, nil }),
				func(context.Context, string) error { return nil })
		}},
		"via": {build: func(p *flow.Pipeline) {
			flow.Sink(flow.Via(flow.Decode[order](p.Source()), func(it flow.Item[order], emit flow.Emit[order]) { emit(it) }), sinkNothing)
		}},
		"operate": {build: func(p *flow.Pipeline) {
			flow.Sink(flow.Operate(flow.Decode[order](p.Source()), func(_ context.Context, in <-chan flow.Item[order], out chan<- flow.Item[order]) error {
				for it := range in {
					out <- it
				}
				return nil
			}), sinkNothing)
		}},
		"flatmap": {build: func(p *flow.Pipeline) {
			flow.Sink(flow.FlatMap(flow.Decode[order](p.Source()), func(_ context.Context, o order) ([]order, error) { return []order{o}, nil }), sinkNothing)
		}},
		"observer": {build: sinkOrders(sinkNothing), opts: []flow.Option{flow.WithObserver(func(flow.Event) {})}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ds := []*ports.Delivery{delivery(`{"id":"a","total":1}`, 0), delivery(`{"id":"b","total":2}`, 0)}
			if got := runRecycling(t, c.build, ds, c.opts...); len(got) != 0 {
				t.Fatalf("recycled %v: a pipeline that shows deliveries must recycle none", got)
			}
		})
	}
}

// A handler's context stays its own: the delivery DeliveryFrom gave away
// is never recycled (it answers for its message after the settlement),
// and the context of a recycled delivery answers no delivery and no
// request id rather than another message's.
func TestDeliveryFromKeepsTheDeliveryOutOfRecycling(t *testing.T) {
	keep := delivery(`{"id":"keep","total":1}`, 0)
	keep.Headers.Set(ports.HeaderRequestID, "req-keep")
	other := delivery(`{"id":"other","total":1}`, 0)
	other.Headers.Set(ports.HeaderRequestID, "req-other")
	keepID, otherID := keep.ID, other.ID
	var mu sync.Mutex
	ctxs := map[string]context.Context{}
	var sawOther string
	got := runRecycling(t, sinkOrders(func(ctx context.Context, o order) error {
		mu.Lock()
		defer mu.Unlock()
		ctxs[o.ID] = ctx
		if o.ID == "keep" {
			flow.DeliveryFrom(ctx)
		} else {
			sawOther = flow.RequestID(ctx) // read while handled: no keeping
		}
		return nil
	}), []*ports.Delivery{keep, other})
	if got[keepID] || !got[otherID] {
		t.Fatalf("recycled %v: want %s (its context only read its request id) and not %s (DeliveryFrom gave it away)", got, otherID, keepID)
	}
	mu.Lock()
	defer mu.Unlock()
	if sawOther != "req-other" {
		t.Errorf("the handler read request id %q, want req-other", sawOther)
	}
	if d := flow.DeliveryFrom(ctxs["keep"]); d != keep || d.ID != keepID || flow.RequestID(ctxs["keep"]) != "req-keep" {
		t.Errorf("the kept context answers %v and request id %q after the settlement, want its own delivery", d, flow.RequestID(ctxs["keep"]))
	}
	if d, req := flow.DeliveryFrom(ctxs["other"]), flow.RequestID(ctxs["other"]); d != nil || req != "" {
		t.Errorf("the context of a recycled delivery answers %v and request id %q, want nil and \"\"", d, req)
	}
}

// totalPairs is a Gather stage's gatherer that emits the totals of two orders
// at a time (and a last one alone at Close), completed with flow.Join: it
// hands on values only.
type totalPairs struct {
	ctx  context.Context
	emit flow.Emit[int]
	held []flow.Item[order]
}

func (g *totalPairs) Push(it flow.Item[order]) {
	if g.held = append(g.held, it); len(g.held) == 2 {
		g.flush()
	}
}

func (g *totalPairs) Close() { g.flush() }

func (g *totalPairs) flush() {
	if len(g.held) == 0 {
		return
	}
	total := 0
	cs := make([]*flow.Completion, len(g.held))
	for i, it := range g.held {
		total += it.Value.Total
		cs[i] = it.Completion
	}
	g.held = nil
	g.emit(flow.Item[int]{Ctx: g.ctx, Value: total, Completion: flow.Join(cs...)})
}

// A Gather stage recycles nothing unless its gatherer promises to hand on
// values only (flow.ValuesOnly, as operators.Batch's ValuesOnly gives):
// then the pipeline recycles every acknowledged delivery, as a pipeline of
// flow's own value stages does.
func TestGatherRecyclesOnlyWhenValuesOnly(t *testing.T) {
	for _, valuesOnly := range []bool{false, true} {
		var opts []flow.StageOption
		if valuesOnly {
			opts = append(opts, flow.ValuesOnly())
		}
		build := func(p *flow.Pipeline) {
			summed := flow.Gather(flow.Decode[order](p.Source()), func(ctx context.Context, emit flow.Emit[int]) flow.Gatherer[order] {
				return &totalPairs{ctx: ctx, emit: emit}
			}, opts...)
			flow.Sink(summed, func(context.Context, int) error { return nil })
		}
		ds := []*ports.Delivery{delivery(`{"id":"a","total":1}`, 0), delivery(`{"id":"b","total":2}`, 0), delivery(`{"id":"c","total":3}`, 0), delivery(`{"id":"d","total":4}`, 0)}
		want := map[string]bool{}
		if valuesOnly {
			for _, d := range ds {
				want[d.ID] = true
			}
		}
		if got := runRecycling(t, build, ds); !maps.Equal(got, want) {
			t.Fatalf("valuesOnly=%v: recycled %v, want %v", valuesOnly, got, want)
		}
	}
}

// transactingFake is recyclingFake as a transactional subscription
// (ports.TransactionalSubscription): Stage records what it was given, by
// the id its delivery had.
type transactingFake struct {
	*recyclingFake
	smu    sync.Mutex
	staged map[string][]ports.Message
}

func (f *transactingFake) Capabilities() ports.Capabilities {
	c := f.recyclingFake.Capabilities()
	c.TransactionalSend = true
	return c
}

func (f *transactingFake) SubscribeTransactional(ctx context.Context, spec ports.SubscriptionSpec) (ports.TransactionalSubscription, error) {
	if _, err := f.recyclingFake.Subscribe(ctx, spec); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *transactingFake) Stage(_ context.Context, d *ports.Delivery, msgs []ports.Message) error {
	f.smu.Lock()
	defer f.smu.Unlock()
	for _, m := range msgs {
		m.Headers = m.Headers.Clone()
		f.staged[d.ID] = append(f.staged[d.ID], m)
	}
	return nil
}

// A TransactTo pipeline hands handlers values only: its acknowledged
// deliveries are recycled, and each staged message still inherits its
// delivery's identity (causation) and correlation id, read from the
// handler's context without keeping the delivery.
func TestTransactToRecyclesAndItsMessagesInheritTheirCause(t *testing.T) {
	f := &transactingFake{recyclingFake: newRecyclingFake(), staged: map[string][]ports.Message{}}
	p := flow.New(f, spec)
	flow.TransactTo(flow.Decode[order](p.Source()), "out")
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	plain, correlated := delivery(`{"id":"a","total":1}`, 0), delivery(`{"id":"b","total":2}`, 0)
	correlated.Headers.Set(ports.HeaderCorrelationID, "corr-b")
	plainID, correlatedID := plain.ID, correlated.ID
	f.push(plain, correlated)
	f.waitSettled(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := f.recycledIDs(); !got[plainID] || !got[correlatedID] {
		t.Errorf("recycled %v: want both acknowledged deliveries, %s and %s", got, plainID, correlatedID)
	}
	f.smu.Lock()
	defer f.smu.Unlock()
	for id, corr := range map[string]string{plainID: plainID, correlatedID: "corr-b"} {
		ms := f.staged[id]
		if len(ms) != 1 {
			t.Fatalf("staged for %s: %v, want one message", id, ms)
		}
		if h := ms[0].Headers; h.Get(ports.HeaderCausationID) != id || h.Get(ports.HeaderCorrelationID) != corr {
			t.Errorf("the message staged for %s has causation %q and correlation %q, want %q and %q",
				id, h.Get(ports.HeaderCausationID), h.Get(ports.HeaderCorrelationID), id, corr)
		}
	}
}
