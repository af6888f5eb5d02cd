package flow_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// recycler is an adapter that hands out the same pre-built deliveries
// again once they are settled and allocates nothing itself, so that a
// benchmark over it counts only what flow allocates per delivery. It hands
// out target deliveries in all, at most perReceive per Receive, then
// closes done once every one was settled.
type recycler struct {
	mu         sync.Mutex
	free       []*ports.Delivery
	out        []*ports.Delivery // Receive's result, reused: flow reads it before the next Receive
	handed     int
	target     int
	settled    int
	perReceive int
	wake       chan struct{} // capacity 1: a delivery was freed
	done       chan struct{} // closed when target deliveries are settled
	stopped    chan struct{}
	errs       chan error
	stopOnce   sync.Once
}

func newRecycler(pool, perReceive, target int) *recycler {
	r := &recycler{
		target: target, perReceive: perReceive,
		out:  make([]*ports.Delivery, 0, pool),
		wake: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}), errs: make(chan error),
	}
	for i := range pool {
		id := fmt.Sprintf("m%d", i)
		r.free = append(r.free, &ports.Delivery{
			Message: ports.Message{Topic: "bench", Payload: []byte(`{"id":"o-1","total":42}`), Headers: ports.NewHeaders(ports.HeaderID, id)},
			ID:      id, IDSource: ports.IDProducer,
		})
	}
	return r
}

func (r *recycler) Name() string { return "recycler" }
func (r *recycler) Capabilities() ports.Capabilities {
	return ports.Capabilities{PublisherConfirm: true}
}
func (r *recycler) Send(context.Context, ...ports.Message) error { return nil }
func (r *recycler) Close(context.Context) error                  { return nil }
func (r *recycler) Errors() <-chan error                         { return r.errs }
func (r *recycler) Subscribe(context.Context, ports.SubscriptionSpec) (ports.Subscription, error) {
	return r, nil
}

func (r *recycler) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	for {
		r.mu.Lock()
		n := min(max, len(r.free), r.perReceive, r.target-r.handed)
		if n > 0 {
			r.out = append(r.out[:0], r.free[len(r.free)-n:]...)
			r.free = r.free[:len(r.free)-n]
			r.handed += n
			r.mu.Unlock()
			return r.out, nil
		}
		r.mu.Unlock()
		select {
		case <-r.wake:
		case <-r.stopped:
			return nil, ports.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (r *recycler) Settle(_ context.Context, ds []*ports.Delivery, _ ports.Disposition) error {
	r.mu.Lock()
	r.free = append(r.free, ds...)
	r.settled += len(ds)
	last := r.settled == r.target
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	if last {
		close(r.done)
	}
	return nil
}

func (r *recycler) Stop(context.Context) error {
	r.stopOnce.Do(func() { close(r.stopped); close(r.errs) })
	return nil
}

// BenchmarkPipelineConsume measures flow alone on the consume path: one op
// is one delivery received, handled and acked, over an adapter that
// allocates nothing, so allocs/op is flow's allocations per delivery.
// inflight=1 settles every delivery in a round of its own (the worst case
// for what a round costs); inflight=256 with perReceive=1 is a consumer
// that keeps up (one delivery per Receive); perReceive=256 lets receive
// batches and settlement rounds grow.
func BenchmarkPipelineConsume(b *testing.B) {
	stages := []struct {
		name  string
		build func(p *flow.Pipeline)
	}{
		{"sink", func(p *flow.Pipeline) {
			flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
		}},
		{"decode-sink", func(p *flow.Pipeline) {
			flow.Sink(flow.Decode[order](p.Source()), func(_ context.Context, o order) error { _ = o.Total * 2; return nil })
		}},
	}
	for _, st := range stages {
		for _, c := range []struct{ inFlight, per int }{{1, 1}, {256, 1}, {256, 256}} {
			b.Run(fmt.Sprintf("%s/inflight=%d/perReceive=%d", st.name, c.inFlight, c.per), func(b *testing.B) {
				r := newRecycler(c.inFlight, c.per, b.N)
				p := flow.New(r, ports.SubscriptionSpec{Topic: "bench", Group: "g", InFlight: c.inFlight})
				st.build(p)
				ctx := context.Background()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				b.ReportAllocs()
				b.ResetTimer()
				if err := p.Start(ctx); err != nil {
					b.Fatal(err)
				}
				<-r.done
				b.StopTimer()
				runtime.ReadMemStats(&m1)
				// allocs/op is truncated to a whole number; this is not.
				b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N), "allocs/delivery")
				// How many deliveries a Settle call carried, on average.
				b.ReportMetric(float64(b.N)/float64(max(1, p.Stats().SettleCalls)), "deliveries/settle")
				if err := p.Stop(ctx); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
