package flow_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// benchPipeline measures the flow hot path over the in-process adapter:
// b.N pre-encoded messages sent in chunks, received, staged and acked.
func benchPipeline(b *testing.B, build func(p *flow.Pipeline, done func())) {
	br, err := mem.NewBroker()
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close(context.Background())
	a, err := mem.New(br)
	if err != nil {
		b.Fatal(err)
	}
	p := flow.New(a, ports.SubscriptionSpec{Topic: "bench", Group: "g", InFlight: 256})
	var n atomic.Int64
	finished := make(chan struct{})
	target := int64(b.N)
	build(p, func() {
		if n.Add(1) == target {
			close(finished)
		}
	})
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer p.Stop(ctx)
	const chunk = 128
	msgs := make([]ports.Message, chunk)
	for i := range msgs {
		msgs[i] = ports.Message{Topic: "bench", Payload: []byte(`{"id":"o-1","total":42}`), Headers: ports.NewHeaders(ports.HeaderID, "x")}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += chunk {
		if err := a.Send(ctx, msgs[:min(chunk, b.N-sent)]...); err != nil {
			b.Fatal(err)
		}
	}
	<-finished
	b.StopTimer()
}

func BenchmarkPipelineSourceSink(b *testing.B) {
	benchPipeline(b, func(p *flow.Pipeline, done func()) {
		flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { done(); return nil })
	})
}

func BenchmarkPipelineDecodeMapSink(b *testing.B) {
	benchPipeline(b, func(p *flow.Pipeline, done func()) {
		m := flow.Map(flow.Decode[order](p.Source()), func(_ context.Context, o order) (int, error) { return o.Total * 2, nil })
		flow.Sink(m, func(context.Context, int) error { done(); return nil })
	})
}
