package rxbridge_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reactivex/rxgo/v2"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/rxbridge"
	"github.com/sluicemq/sluice/ports"
)

// benchSource hands out prepared deliveries and counts settlements.
type benchSource struct {
	mu      sync.Mutex
	ds      []*ports.Delivery
	settled atomic.Int64
	want    int64
	done    chan struct{}
	errs    chan error
}

func (s *benchSource) Name() string                                 { return "bench" }
func (s *benchSource) Capabilities() ports.Capabilities             { return ports.Capabilities{} }
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

// bench runs b.N deliveries (payloads 0..N-1) through build; ns/op and
// allocs/op are per delivery.
func bench(b *testing.B, build func(p *flow.Pipeline)) {
	src := &benchSource{ds: make([]*ports.Delivery, b.N), want: int64(b.N), done: make(chan struct{}), errs: make(chan error)}
	close(src.errs)
	for i := range src.ds {
		src.ds[i] = &ports.Delivery{ID: strconv.Itoa(i), Message: ports.Message{Topic: "t", Payload: []byte(strconv.Itoa(i))}}
	}
	p := flow.New(src, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 256})
	build(p)
	b.ReportAllocs()
	b.ResetTimer()
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-src.done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d settled within 2m", src.settled.Load(), b.N)
	}
	b.StopTimer()
	_ = p.Stop(context.Background())
}

func parse(_ context.Context, d *ports.Delivery) (int, error) { return strconv.Atoi(string(d.Payload)) }
func isEven(_ context.Context, n int) (bool, error)           { return n%2 == 0, nil }

// The same work both ways: parse the payload, keep the even ones, sink.

func BenchmarkRxBridgeMapFilter(b *testing.B) {
	bench(b, func(p *flow.Pipeline) {
		out := rxbridge.Through[*ports.Delivery, int](p.Source(), func(o rxgo.Observable) rxgo.Observable {
			return o.Map(rxbridge.Map(parse)).Filter(rxbridge.Keep(isEven))
		})
		flow.Sink(out, func(context.Context, int) error { return nil })
	})
}

func BenchmarkFlowMapFilter(b *testing.B) {
	bench(b, func(p *flow.Pipeline) {
		out := flow.Filter(flow.Map(p.Source(), parse), isEven)
		flow.Sink(out, func(context.Context, int) error { return nil })
	})
}
