package operators_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

// benchSource is a minimal adapter for benchmarks: it hands out a
// prepared slice of deliveries and counts settlements.
type benchSource struct {
	mu      sync.Mutex
	ds      []*ports.Delivery
	settled atomic.Int64
	want    int64
	done    chan struct{}
	errs    chan error
}

func newBenchSource(n int) *benchSource {
	s := &benchSource{ds: make([]*ports.Delivery, n), want: int64(n), done: make(chan struct{}), errs: make(chan error)}
	for i := range s.ds {
		id := "b" + strconv.Itoa(i)
		s.ds[i] = &ports.Delivery{ID: id, Message: ports.Message{Topic: "t", Key: "k" + strconv.Itoa(i%16), Payload: []byte(`{"n":1}`)}}
	}
	return s
}

func (s *benchSource) Name() string { return "bench" }
func (s *benchSource) Capabilities() ports.Capabilities {
	return ports.Capabilities{PublisherConfirm: true}
}
func (s *benchSource) Send(context.Context, ...ports.Message) error { return nil }
func (s *benchSource) Close(context.Context) error                  { return nil }
func (s *benchSource) Errors() <-chan error                         { return s.errs }
func (s *benchSource) Stop(context.Context) error                   { return nil }
func (s *benchSource) Subscribe(context.Context, ports.SubscriptionSpec) (ports.Subscription, error) {
	return s, nil
}

func (s *benchSource) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	s.mu.Lock()
	n := min(max, len(s.ds))
	ds := s.ds[:n:n]
	s.ds = s.ds[n:]
	s.mu.Unlock()
	if n == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return ds, nil
}

func (s *benchSource) Settle(_ context.Context, ds []*ports.Delivery, _ ports.Disposition) error {
	if s.settled.Add(int64(len(ds))) == s.want {
		close(s.done)
	}
	return nil
}

// benchPipeline runs b.N deliveries through the stages build adds and
// reports per-item cost (ns/op and allocs/op are per delivery).
func benchPipeline(b *testing.B, sp ports.SubscriptionSpec, build func(p *flow.Pipeline)) {
	src := newBenchSource(b.N)
	close(src.errs)
	if sp.Topic == "" {
		sp = ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 256}
	}
	p := flow.New(src, sp)
	build(p)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-src.done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d settled within 2m", src.settled.Load(), b.N)
	}
	el := time.Since(start)
	b.StopTimer()
	_ = p.Stop(context.Background())
	b.ReportMetric(float64(b.N)/el.Seconds(), "items/s")
}

func sinkNop[T any](s flow.Stream[T]) {
	flow.Sink(s, func(context.Context, T) error { return nil })
}

func idMap(_ context.Context, d *ports.Delivery) (*ports.Delivery, error) { return d, nil }

func BenchmarkBaselineSink(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) { sinkNop(p.Source()) })
}

func BenchmarkBatch100(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		sinkNop(operators.Batch(p.Source(), operators.BatchOptions{Size: 100, Window: 10 * time.Millisecond}))
	})
}

func BenchmarkBatch100IsolatePoison(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		sinkNop(operators.Batch(p.Source(), operators.BatchOptions{Size: 100, Window: 10 * time.Millisecond, IsolatePoison: true}))
	})
}

func BenchmarkClassify(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		sinkNop(operators.Classify(p.Source(), operators.Classifier{}))
	})
}

func BenchmarkDelayZero(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) { sinkNop(operators.Delay(p.Source(), 0)) })
}

func BenchmarkConcurrent4(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		sinkNop(operators.Concurrent(p.Source(), idMap, operators.ConcurrentOptions{Limit: 4}))
	})
}

func BenchmarkConcurrent4Ordered(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		sinkNop(operators.Concurrent(p.Source(), idMap, operators.ConcurrentOptions{Limit: 4, Ordered: true}))
	})
}

func BenchmarkKeyOrdered4(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		sinkNop(operators.KeyOrdered(p.Source(), idMap, operators.KeyOrderedOptions[*ports.Delivery]{Limit: 4}))
	})
}

func BenchmarkTimeout(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) { sinkNop(operators.Timeout(p.Source(), time.Minute)) })
}

func BenchmarkThrottleUnbound(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		sinkNop(operators.Throttle(p.Source(), operators.ThrottleOptions{Rate: 1e12, Burst: 1000}))
	})
}

func BenchmarkDedupeMemory(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		sinkNop(operators.Dedupe(p.Source(), operators.DedupeOptions[*ports.Delivery]{}))
	})
}

func BenchmarkRetryWrapperNoFailure(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), operators.Retry(func(context.Context, *ports.Delivery) error { return nil }, operators.RetryOptions{}))
	})
}

func BenchmarkRedeliveryLimit(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{}, func(p *flow.Pipeline) { sinkNop(operators.RedeliveryLimit(p.Source(), 5)) })
}

func countFold(acc int, _ *ports.Delivery) int { return acc + 1 }

func BenchmarkWindowTumbling16Keys(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 4096}, func(p *flow.Pipeline) {
		sinkNop(operators.Window(p.Source(), operators.WindowOptions[*ports.Delivery, string]{Size: 5 * time.Millisecond, Key: byMsgKey}, countFold))
	})
}

func BenchmarkWindowSliding16Keys(b *testing.B) {
	benchPipeline(b, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 4096}, func(p *flow.Pipeline) {
		sinkNop(operators.Window(p.Source(), operators.WindowOptions[*ports.Delivery, string]{Size: 10 * time.Millisecond, Slide: 5 * time.Millisecond, Key: byMsgKey}, countFold))
	})
}
