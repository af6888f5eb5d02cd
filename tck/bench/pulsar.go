package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() { register("pulsar", pulsarSuite) }

// pulsarSuite needs a real Pulsar at PULSAR_URL (none runs on the project's
// machines). It runs the same confirmed publish → decode → map → ack work
// through the sluice adapter and through pulsar-client-go directly, each on
// a fresh topic:
//
//	PULSAR_URL=pulsar://127.0.0.1:6650 go run ./tck/bench -adapter pulsar -n 2000
//
// Both publish one message at a time with a synchronous, broker-confirmed
// send, and both acknowledge with AckWithResponse, so the ratio shows what
// the adapter and flow add over the client, not a difference in guarantees.
func pulsarSuite(ctx context.Context, cfg Config) ([]Result, []Ratio, error) {
	url := os.Getenv("PULSAR_URL")
	if url == "" {
		return nil, nil, errors.New("pulsar: PULSAR_URL not set (e.g. pulsar://127.0.0.1:6650); no Pulsar broker runs on the project's machines")
	}
	results, err := rounds(ctx, cfg,
		func(ctx context.Context, cfg Config) (Result, error) { return runPulsarClient(ctx, url, cfg) },
		func(ctx context.Context, cfg Config) (Result, error) { return runPulsarAdapter(ctx, url, cfg) })
	return results, []Ratio{{Label: "pulsar/pulsar-client", Num: "pulsar", Den: "pulsar-client"}}, err
}

func benchTopic() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "sluice-bench-" + hex.EncodeToString(b[:])
}

// runPulsarAdapter: flow.Send → adapter → Decode → Map → Sink → ACK.
func runPulsarAdapter(ctx context.Context, url string, cfg Config) (Result, error) {
	a, err := pulsar.New(pulsar.WithURL(url))
	if err != nil {
		return Result{}, err
	}
	defer a.Close(context.Background())
	topic := ports.Topic(benchTopic())
	spec := ports.SubscriptionSpec{Topic: topic, Group: "bench", InFlight: cfg.InFlight}
	var lat Latencies
	var done atomic.Int64
	finished := make(chan struct{})
	p := flow.New(a, spec)
	out := flow.Map(flow.Decode[benchMsg](p.Source()), func(_ context.Context, m benchMsg) (benchOut, error) { return scale(m), nil })
	flow.Sink(out, func(_ context.Context, o benchOut) error {
		lat.Add(time.Duration(time.Now().UnixNano() - o.SentNS))
		if done.Add(1) == int64(cfg.N) {
			close(finished)
		}
		return nil
	})
	if err := p.Start(ctx); err != nil {
		return Result{}, err
	}
	defer p.Stop(context.Background())
	padding := pad(cfg.Payload)
	var m Meter
	m.Start()
	for i := range cfg.N {
		msg := benchMsg{Device: "dev", Value: float64(i), Pad: padding, SentNS: time.Now().UnixNano()}
		if err := flow.Send(ctx, a, topic, msg); err != nil {
			return Result{}, err
		}
	}
	select {
	case <-finished:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("pulsar: %d of %d handled: %w", done.Load(), cfg.N, ctx.Err())
	}
	for p.Stats().Acked < int64(cfg.N) {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("pulsar: %d of %d acked: %w", p.Stats().Acked, cfg.N, ctx.Err())
		}
		time.Sleep(50 * time.Microsecond) // the last acks trail the handler
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "pulsar", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: "flow.Send → pulsar adapter → Decode → Map → Sink → ACK"}, nil
}

// runPulsarClient is the baseline: the client alone, with the same
// confirmed sends and acknowledged-with-response acks.
func runPulsarClient(ctx context.Context, url string, cfg Config) (Result, error) {
	client, err := pulsarclient.NewClient(pulsarclient.ClientOptions{URL: url, Logger: pulsarlog.DefaultNopLogger()})
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	topic := "persistent://public/default/" + benchTopic()
	consumer, err := client.Subscribe(pulsarclient.ConsumerOptions{
		Topic: topic, SubscriptionName: "bench", Type: pulsarclient.Shared,
		ReceiverQueueSize: cfg.InFlight, AckWithResponse: true,
	})
	if err != nil {
		return Result{}, err
	}
	defer consumer.Close()
	producer, err := client.CreateProducer(pulsarclient.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		return Result{}, err
	}
	defer producer.Close()

	var lat Latencies
	consumed := make(chan error, 1)
	go func() {
		for n := 0; n < cfg.N; n++ {
			msg, err := consumer.Receive(ctx)
			if err != nil {
				consumed <- err
				return
			}
			var m benchMsg
			if err := json.Unmarshal(msg.Payload(), &m); err != nil {
				consumed <- err
				return
			}
			o := scale(m)
			lat.Add(time.Duration(time.Now().UnixNano() - o.SentNS))
			if err := consumer.AckID(msg.ID()); err != nil {
				consumed <- err
				return
			}
		}
		consumed <- nil
	}()
	padding := pad(cfg.Payload)
	var m Meter
	m.Start()
	for i := range cfg.N {
		b, err := json.Marshal(benchMsg{Device: "dev", Value: float64(i), Pad: padding, SentNS: time.Now().UnixNano()})
		if err != nil {
			return Result{}, err
		}
		if _, err := producer.Send(ctx, &pulsarclient.ProducerMessage{Payload: b}); err != nil {
			return Result{}, err
		}
	}
	if err := <-consumed; err != nil {
		return Result{}, err
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "pulsar-client", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: "client Send → Receive → Unmarshal → map → AckID"}, nil
}
