package pulsartest_test

import (
	"context"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
)

// BenchmarkRoundTrip measures publish (batched, confirmed) plus consume and
// acknowledge of b.N small messages through the plain client. Run it with
// a fixed count, e.g. -bench RoundTrip -benchtime 20000x.
func BenchmarkRoundTrip(b *testing.B) {
	for _, batching := range []bool{true, false} {
		name := "batched"
		if !batching {
			name = "unbatched"
		}
		b.Run(name, func(b *testing.B) { benchRoundTrip(b, batching) })
	}
}

func benchRoundTrip(b *testing.B, batching bool) {
	broker, err := pulsartest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: broker.URL(), Logger: log.DefaultNopLogger(), MetricsRegisterer: prometheus.NewRegistry(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	topic := "bench"
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Shared})
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: !batching})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	payload := make([]byte, 100)
	ctx, cancel := context.WithTimeout(context.Background(), wait*6)
	defer cancel()

	b.ResetTimer()
	errs := make(chan error, 1)
	go func() {
		for range b.N {
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			})
		}
		if err := p.FlushWithCtx(ctx); err != nil {
			errs <- err
		}
	}()
	for range b.N {
		m, err := cons.Receive(ctx)
		if err != nil {
			b.Fatalf("Receive: %v", err)
		}
		if err := cons.AckID(m.ID()); err != nil {
			b.Fatalf("Ack: %v", err)
		}
	}
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatalf("send: %v", err)
	default:
	}
}
