package flow_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// deferringFake is recyclingFake whose subscription can leave headers
// unread (ports.HeaderDeferrer): once asked, push hands deliveries out
// without their headers, and LoadHeaders puts them back.
type deferringFake struct {
	*recyclingFake
	dmu      sync.Mutex
	deferred bool
	held     map[*ports.Delivery]ports.Headers
	loaded   map[string]int // LoadHeaders calls that filled a delivery in, by id
}

func newDeferringFake() *deferringFake {
	return &deferringFake{recyclingFake: newRecyclingFake(), held: map[*ports.Delivery]ports.Headers{}, loaded: map[string]int{}}
}

func (f *deferringFake) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if _, err := f.recyclingFake.Subscribe(ctx, spec); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *deferringFake) DeferHeaders() {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	f.deferred = true
}

func (f *deferringFake) LoadHeaders(d *ports.Delivery) {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	if h, ok := f.held[d]; ok {
		d.Headers = h
		delete(f.held, d)
		f.loaded[d.ID]++
	}
}

// pushDeferred pushes ds, their headers left out when the pipeline asked
// for it.
func (f *deferringFake) pushDeferred(ds ...*ports.Delivery) {
	f.dmu.Lock()
	if f.deferred {
		for _, d := range ds {
			f.held[d], d.Headers = d.Headers, nil
		}
	}
	f.dmu.Unlock()
	f.push(ds...)
}

// A value-only pipeline asks a subscription that can to leave headers
// unread; a handler's request id and DeliveryFrom load them first, each
// delivery's once, and a delivery whose headers nobody asked for is
// recycled without them ever being read.
func TestDeferredHeadersLoadBeforeAHandlerReadsThem(t *testing.T) {
	f := newDeferringFake()
	p := flow.New(f, spec)
	var mu sync.Mutex
	reqs := map[string]string{}
	var kept *ports.Delivery
	flow.Sink(flow.Decode[order](p.Source()), func(ctx context.Context, o order) error {
		mu.Lock()
		defer mu.Unlock()
		switch o.ID {
		case "req":
			reqs["first"], reqs["second"] = flow.RequestID(ctx), flow.RequestID(ctx)
		case "keep":
			kept = flow.DeliveryFrom(ctx)
		}
		return nil
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	if !f.deferred {
		t.Fatal("a value-only pipeline did not ask the subscription to defer headers")
	}
	req, keep, none := delivery(`{"id":"req","total":1}`, 0), delivery(`{"id":"keep","total":1}`, 0), delivery(`{"id":"none","total":1}`, 0)
	req.Headers.Set(ports.HeaderRequestID, "req-1")
	keep.Headers.Set("x-kept", "yes")
	reqID, keepID, noneID := req.ID, keep.ID, none.ID
	f.pushDeferred(req, keep, none)
	f.waitSettled(t, 3)
	mu.Lock()
	defer mu.Unlock()
	if reqs["first"] != "req-1" || reqs["second"] != "req-1" {
		t.Fatalf("request ids %v, want req-1 twice", reqs)
	}
	if kept == nil || kept.Headers.Get("x-kept") != "yes" || kept.Headers.Get(ports.HeaderID) != keepID {
		t.Fatalf("DeliveryFrom gave %+v, want its headers loaded", kept)
	}
	f.dmu.Lock()
	defer f.dmu.Unlock()
	if f.loaded[reqID] != 1 || f.loaded[keepID] != 1 || f.loaded[noneID] != 0 {
		t.Fatalf("loads %v: want one each for %s and %s, none for %s", f.loaded, reqID, keepID, noneID)
	}
}

// A pipeline whose stages can show deliveries (or that has an observer)
// never asks for deferred headers: its deliveries have them from the
// start.
func TestPipelinesThatShowDeliveriesDeferNoHeaders(t *testing.T) {
	for name, c := range map[string]struct {
		build func(*flow.Pipeline)
		opts  []flow.Option
	}{
		"via": {build: func(p *flow.Pipeline) {
			flow.Sink(flow.Via(flow.Decode[order](p.Source()), func(it flow.Item[order], emit flow.Emit[order]) { emit(it) }),
				func(context.Context, order) error { return nil })
		}},
		"sink on the source": {build: func(p *flow.Pipeline) {
			flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
		}},
		"observer": {build: sinkOrders(func(context.Context, order) error { return nil }), opts: []flow.Option{flow.WithObserver(func(flow.Event) {})}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newDeferringFake()
			p := flow.New(f, spec, c.opts...)
			c.build(p)
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer p.Stop(context.Background())
			if f.deferred {
				t.Fatal("asked the subscription to defer headers")
			}
		})
	}
}

// lookingUpFake is deferringFake that can read one deferred header
// (ports.HeaderLookup), counting those reads.
type lookingUpFake struct {
	*deferringFake
	lookups int
}

func (f *lookingUpFake) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if _, err := f.deferringFake.Subscribe(ctx, spec); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *lookingUpFake) LookupHeader(d *ports.Delivery, name string) (string, bool) {
	f.dmu.Lock()
	defer f.dmu.Unlock()
	f.lookups++
	if h, ok := f.held[d]; ok {
		return h.Lookup(name)
	}
	return d.Headers.Lookup(name)
}

// Where the subscription can read one deferred header, a message built
// from a handler's context (NewMessage) reads the ids it inherits one by
// one and loads no delivery's headers.
func TestNewMessageReadsDeferredIdsWithoutLoadingHeaders(t *testing.T) {
	f := &lookingUpFake{deferringFake: newDeferringFake()}
	p := flow.New(f, spec)
	var mu sync.Mutex
	var built ports.Message
	flow.Sink(flow.Decode[order](p.Source()), func(ctx context.Context, o order) error {
		m, err := flow.NewMessage(ctx, "out", o)
		mu.Lock()
		defer mu.Unlock()
		built = m
		return err
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	d := delivery(`{"id":"a","total":1}`, 0)
	d.Headers.Set(ports.HeaderRequestID, "req-a")
	d.Headers.Set(ports.HeaderCorrelationID, "corr-a")
	id := d.ID
	f.pushDeferred(d)
	f.waitSettled(t, 1)
	mu.Lock()
	defer mu.Unlock()
	h := built.Headers
	if h.Get(ports.HeaderRequestID) != "req-a" || h.Get(ports.HeaderCorrelationID) != "corr-a" || h.Get(ports.HeaderCausationID) != id {
		t.Fatalf("built headers %v: want request id req-a, correlation corr-a and causation %s", h, id)
	}
	f.dmu.Lock()
	defer f.dmu.Unlock()
	if len(f.loaded) != 0 || f.lookups == 0 {
		t.Fatalf("loads %v and %d lookups: want the ids looked up, no headers loaded", f.loaded, f.lookups)
	}
}
