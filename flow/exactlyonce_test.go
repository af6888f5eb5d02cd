package flow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// specRecorder is a fake adapter that remembers the spec it was
// subscribed with.
type specRecorder struct {
	*fakeAdapter
	spec *ports.SubscriptionSpec
}

func (r specRecorder) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	*r.spec = spec
	return r.fakeAdapter.Subscribe(ctx, spec)
}

func exactlyOnceSpec() ports.SubscriptionSpec {
	return ports.SubscriptionSpec{Topic: "t", Group: "g", QoS: ports.ExactlyOnce}
}

func nop(context.Context, *ports.Delivery) error { return nil }

// A pipeline asking for ExactlyOnce whose every Sink declared an
// exactly-once effect starts, and subscribes the adapter at least once.
func TestExactlyOnceStartsWithExactlyOnceSinks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got ports.SubscriptionSpec
	p := flow.New(specRecorder{newFake(), &got}, exactlyOnceSpec())
	flow.Sink(flow.Decode[string](p.Source()), func(context.Context, string) error { return nil }, flow.ExactlyOnceEffect())
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer p.Stop(context.Background())
	if got.QoS != ports.AtLeastOnce {
		t.Errorf("adapter subscribed with %v, want at-least-once (the transport stays at least once)", got.QoS)
	}
}

// Start refuses ExactlyOnce with an error wrapping ports.ErrExactlyOnce
// that says which sink is not exactly-once and what to use.
func TestExactlyOnceStartRefusals(t *testing.T) {
	cases := []struct {
		name  string
		build func(p *flow.Pipeline)
		want  []string
	}{
		{"plain sink", func(p *flow.Pipeline) {
			flow.Sink(p.Source(), nop)
		}, []string{"Sink 1 of 1", "inbox.Sink"}},
		{"filter after fan-out", func(p *flow.Pipeline) {
			parts := flow.FlatMap(p.Source(), func(_ context.Context, d *ports.Delivery) ([]*ports.Delivery, error) {
				return []*ports.Delivery{d}, nil
			})
			ok := flow.Filter(parts, func(context.Context, *ports.Delivery) (bool, error) { return true, nil })
			flow.Sink(ok, nop, flow.ExactlyOnceEffect())
		}, []string{"Sink 1 of 1", "follows FlatMap"}},
		{"fan-out before the sink", func(p *flow.Pipeline) {
			s := flow.FlatMap(p.Source(), func(_ context.Context, d *ports.Delivery) ([]*ports.Delivery, error) {
				return []*ports.Delivery{d, d}, nil
			})
			flow.Sink(s, nop, flow.ExactlyOnceEffect())
		}, []string{"follows FlatMap"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			f := newFake()
			p := flow.New(f, exactlyOnceSpec())
			c.build(p)
			err := p.Start(ctx)
			if err == nil {
				p.Stop(context.Background())
				t.Fatal("Start accepted ExactlyOnce")
			}
			if !errors.Is(err, ports.ErrExactlyOnce) {
				t.Errorf("error %v does not wrap ports.ErrExactlyOnce", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			f.mu.Lock()
			subscribed := f.subscribed
			f.mu.Unlock()
			if subscribed {
				t.Error("the adapter was subscribed although Start refused")
			}
		})
	}
}

// Without QoS ExactlyOnce, ExactlyOnceEffect changes nothing, and a plain
// sink is fine.
func TestExactlyOnceEffectWithoutExactlyOnceQoS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := flow.New(newFake(), ports.SubscriptionSpec{Topic: "t", Group: "g"})
	s := flow.FlatMap(p.Source(), func(_ context.Context, d *ports.Delivery) ([]*ports.Delivery, error) {
		return []*ports.Delivery{d}, nil
	})
	flow.Sink(s, nop, flow.ExactlyOnceEffect())
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	p.Stop(context.Background())
}

// A part of a Split, and what is derived from it, says so.
func TestCompletionPart(t *testing.T) {
	c := flow.NewCompletion(func(flow.Outcome) {})
	if c.Part() {
		t.Error("a whole completion says it is a part")
	}
	kids := c.Split(2)
	if !kids[0].Part() || !kids[1].Part() {
		t.Error("a part of a Split does not say so")
	}
	if !kids[0].Derive(func(flow.Outcome) {}).Part() {
		t.Error("a completion derived from a part does not say so")
	}
	if c.Derive(func(flow.Outcome) {}).Part() {
		t.Error("a completion derived from a whole one says it is a part")
	}
	for _, k := range kids {
		_ = k.Succeed()
	}
}
