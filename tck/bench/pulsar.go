package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	"github.com/sluicemq/sluice/ports"
)

// The pulsar suite runs against a real Pulsar at PULSAR_URL when set,
// else against pulsartest, the in-process Pulsar protocol peer on
// 127.0.0.1 (no Pulsar broker runs on the project's machines; as for
// rocketmq's peer, its figures measure the clients, not a broker):
//
//	PULSAR_URL=pulsar://127.0.0.1:6650 go run ./tck/bench -adapter pulsar -n 2000
//
// Every contender publishes one message at a time with a synchronous,
// broker-confirmed send while consuming, and acknowledges with
// AckWithResponse, so the ratio shows what the adapter and flow add over
// the client, not a difference in guarantees. The raw client's strongest
// configuration for that guarantee acknowledges many ids per call
// (AckIDList, as the adapter does): pulsar-client-acklist, the
// denominator; pulsar-client, one AckID per message, is kept as a weaker
// line.
func init() {
	t := target{open: openPulsar, publishers: 1, chunk: 1}
	register(Suite{
		Name:     "pulsar",
		About:    "confirmed publish and consume concurrently on a fresh topic (PULSAR_URL, else the pulsartest protocol peer)",
		DefaultN: 2000,
		Setup: func(context.Context, Config) (Env, func(), error) {
			if url := os.Getenv("PULSAR_URL"); url != "" {
				fmt.Println("broker: PULSAR_URL")
				return Env{"url": url}, func() {}, nil
			}
			b, err := pulsartest.Start()
			if err != nil {
				return nil, nil, fmt.Errorf("no PULSAR_URL and the pulsartest peer could not start: %w", err)
			}
			fmt.Println("broker: pulsartest, the in-process Pulsar protocol peer on 127.0.0.1 (not Apache Pulsar)")
			return Env{"url": b.URL()}, b.Close, nil
		},
		Contenders: []Contender{
			{Name: "pulsar-client-acklist", Run: runPulsarClientWith(true)},
			{Name: "pulsar-client", Run: runPulsarClientWith(false)},
			{Name: "pulsar", Run: t.runPipeline(false)},
			{Name: "pulsar-batch", Run: t.runPipeline(true)},
		},
		Ratios: []Ratio{
			{Label: "pulsar/best-raw", Num: "pulsar", Den: []string{"pulsar-client-acklist", "pulsar-client"}},
			{Label: "pulsar-batch/best-raw", Num: "pulsar-batch", Den: []string{"pulsar-client-acklist", "pulsar-client"}},
			{Label: "pulsar/pulsar-client-ackid", Num: "pulsar", Den: []string{"pulsar-client"}},
		},
	})
}

func benchTopic() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "sluice-bench-" + hex.EncodeToString(b[:])
}

func openPulsar(_ context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	a, err := pulsar.New(context.Background(), pulsar.Options{URL: env["url"], Logger: quiet})
	if err != nil {
		return nil, ports.SubscriptionSpec{}, nil, err
	}
	spec := ports.SubscriptionSpec{Topic: ports.Topic(benchTopic()), Group: "bench", InFlight: cfg.InFlight}
	return a, spec, func() { _ = a.Close(context.Background()) }, nil
}

// runPulsarClientWith returns the baseline: the client alone, with the
// same confirmed sends and acknowledged-with-response acks, one AckIDList
// of up to in-flight/2 ids (and the last) when list, else one AckID per
// message.
func runPulsarClientWith(list bool) func(context.Context, Env, Config) (Result, error) {
	return func(ctx context.Context, env Env, cfg Config) (Result, error) {
		return runPulsarClient(ctx, env, cfg, list)
	}
}

func runPulsarClient(ctx context.Context, env Env, cfg Config, list bool) (Result, error) {
	client, err := pulsarclient.NewClient(pulsarclient.ClientOptions{URL: env["url"], Logger: pulsarlog.DefaultNopLogger()})
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
	tl := newTally(cfg.N)
	m := newMeter(tl)
	consumed := make(chan error, 1)
	every := max(cfg.InFlight/2, 1)
	go func() {
		var ids []pulsarclient.MessageID
		var idx []int
		acked := 0
		for range cfg.N {
			msg, err := consumer.Receive(ctx)
			if err != nil {
				consumed <- err
				return
			}
			m.begin()
			i, err := handleJSON(msg.Payload())
			if err != nil {
				consumed <- err
				return
			}
			if !list {
				if err := consumer.AckID(msg.ID()); err != nil {
					consumed <- err
					return
				}
				tl.mark(i)
				continue
			}
			ids, idx = append(ids, msg.ID()), append(idx, i)
			if len(ids) < every && len(idx)+acked < cfg.N {
				continue
			}
			if err := consumer.AckIDList(ids); err != nil {
				consumed <- err
				return
			}
			for _, j := range idx {
				tl.mark(j)
			}
			acked += len(ids)
			ids, idx = ids[:0], idx[:0]
		}
		consumed <- nil
	}()
	padding := pad(cfg.Payload)
	for i := range cfg.N {
		if _, err := producer.Send(ctx, &pulsarclient.ProducerMessage{Payload: encodeMsg(i, padding)}); err != nil {
			return Result{}, err
		}
	}
	if err := <-consumed; err != nil {
		return Result{}, err
	}
	if list {
		return finishNote(m, "pulsar-client-acklist", fmt.Sprintf("client Send → Receive → Unmarshal → map → AckIDList of up to %d ids", every))
	}
	return finishNote(m, "pulsar-client", "client Send → Receive → Unmarshal → map → AckID")
}
