package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func init() { register("amqp", amqpSuite) }

// The amqp suite runs one workload — N messages published with confirms
// (at most maxOutstanding(cfg) published and not yet settled), each
// decoded and mapped by a one-stage handler and settled — through:
//
//	amqp       this adapter: Send (amqpProducers goroutines, amqpChunk
//	           messages per Send, together filling the window) → flow
//	           pipeline → Sink → ACK
//	raw        amqp091-go by hand: one publisher with asynchronous
//	           confirms, one consumer goroutine, the same prefetch, one ack
//	           per message (a multiple-ack per batch with -batch)
//	raw+env    raw publishing the same bytes as the adapter (message id,
//	           spec version and time headers), to separate the cost of
//	           the envelope from the cost of the adapter
//	watermill  watermill-amqp's NewDurableQueueConfig with ConfirmDelivery
//	           (the workload publishes with confirms), published by the
//	           same producer goroutines, consumed by a Watermill router
//
// The broker is $AMQP_URL, or a private RabbitMQ node started for the run
// (rabbittest) on 127.0.0.1. amqp and raw use quorum queues (the adapter's
// default); watermill uses its config's classic durable queue.
func amqpSuite(ctx context.Context, cfg Config) ([]Result, []Ratio, error) {
	url := os.Getenv("AMQP_URL")
	if url == "" {
		node, err := rabbittest.Start(ctx, rabbittest.Options{})
		if err != nil {
			return nil, nil, fmt.Errorf("amqp: no AMQP_URL and no local RabbitMQ: %w", err)
		}
		defer node.Stop()
		url = node.URL
	}
	b := amqpBench{url: url}
	contenders := []func(context.Context, Config) (Result, error){b.runRaw, b.runRawEnvelope, b.runAdapter}
	ratios := []Ratio{{Label: "amqp/raw", Num: "amqp", Den: "raw"}, {Label: "amqp/raw+env", Num: "amqp", Den: "raw+env"}}
	if cfg.Batch > 0 {
		contenders = append(contenders, b.runRawBatch, b.runRawBatchEnvelope, b.runAdapterBatch)
		ratios = append(ratios, Ratio{Label: "amqp-batch/raw-batch", Num: "amqp-batch", Den: "raw-batch"},
			Ratio{Label: "amqp-batch/raw-batch+env", Num: "amqp-batch", Den: "raw-batch+env"})
	}
	contenders = append(contenders, b.runWatermill)
	ratios = append(ratios, Ratio{Label: "amqp/watermill", Num: "amqp", Den: "watermill"})

	warm := cfg
	warm.N = min(cfg.N, 2000)
	for _, run := range contenders {
		if _, err := run(ctx, warm); err != nil {
			return nil, nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	results, err := rounds(ctx, cfg, contenders...)
	return results, ratios, err
}

type amqpBench struct {
	url string
	seq atomic.Int64
}

// namespace gives every run fresh exchanges and queues.
func (b *amqpBench) namespace(name string) string {
	return fmt.Sprintf("bench-%s-%d-%d", name, os.Getpid(), b.seq.Add(1))
}

// amqpChunk is how many messages one producer publishes per call; there
// are as many producers as it takes for the chunks to fill the window,
// since each waits for its chunk's confirms. (More producers than that
// could each hold part of a chunk's tokens and starve one another.)
const amqpChunk = 16

func amqpProducers(cfg Config) int { return max(1, maxOutstanding(cfg)/amqpChunk) }

// handleMsg is the one stage every contender runs: decode and map.
func handleMsg(body []byte, lat *Latencies) error {
	var m benchMsg
	if err := json.Unmarshal(body, &m); err != nil {
		return ports.Poison(err)
	}
	o := scale(m)
	lat.Add(time.Duration(time.Now().UnixNano() - o.SentNS))
	return nil
}

// encodeMsg is the payload of message i, stamped with its send time.
func encodeMsg(i int, padding string) []byte {
	b, _ := json.Marshal(benchMsg{Device: "dev", Value: float64(i), Pad: padding, SentNS: time.Now().UnixNano()})
	return b
}

// produce runs amqpProducers goroutines that publish cfg.N messages in
// chunks of amqpChunk, each chunk taking as many tokens from window first.
func produce(ctx context.Context, cfg Config, window chan struct{}, publish func(ctx context.Context, payloads [][]byte) error) error {
	var next atomic.Int64
	padding := pad(cfg.Payload)
	errs := make(chan error, amqpProducers(cfg))
	var wg sync.WaitGroup
	for range amqpProducers(cfg) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(amqpChunk)) - amqpChunk
				if start >= cfg.N {
					return
				}
				n := min(amqpChunk, cfg.N-start)
				payloads := make([][]byte, n)
				for i := range n {
					select {
					case window <- struct{}{}:
					case <-ctx.Done():
						errs <- ctx.Err()
						return
					}
					payloads[i] = encodeMsg(start+i, padding)
				}
				if err := publish(ctx, payloads); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitDone waits until done reaches n.
func waitDone(ctx context.Context, name string, finished <-chan struct{}, done *atomic.Int64, n int) error {
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %d of %d settled: %w", name, done.Load(), n, ctx.Err())
	}
}

// runAdapter is this adapter under a flow pipeline, single delivery.
func (b *amqpBench) runAdapter(ctx context.Context, cfg Config) (Result, error) {
	return b.adapterRun(ctx, cfg, "amqp", false)
}

// runAdapterBatch is this adapter with operators.Batch of cfg.Batch (one
// outcome per batch; the adapter coalesces the members' acks into
// multiple-acks).
func (b *amqpBench) runAdapterBatch(ctx context.Context, cfg Config) (Result, error) {
	return b.adapterRun(ctx, cfg, "amqp-batch", true)
}

func (b *amqpBench) adapterRun(ctx context.Context, cfg Config, name string, batch bool) (Result, error) {
	a, err := amqp.New(ctx, amqp.Options{URL: b.url, Namespace: b.namespace(name)})
	if err != nil {
		return Result{}, err
	}
	defer a.Close(context.Background())
	spec := ports.SubscriptionSpec{Topic: "bench", Group: "bench", InFlight: cfg.InFlight}
	if batch {
		spec.Batch = ports.BatchSpec{Size: cfg.Batch, Window: 5 * time.Millisecond}
	}
	var lat Latencies
	var done atomic.Int64
	finished := make(chan struct{})
	window := make(chan struct{}, maxOutstanding(cfg))
	settled := func(n int) {
		for range n {
			<-window
		}
		if done.Add(int64(n)) == int64(cfg.N) {
			close(finished)
		}
	}
	p := flow.New(a, spec, flow.WithDrainTimeout(0))
	if batch {
		flow.Sink(operators.Batch(p.Source(), operators.BatchOptions{}), func(_ context.Context, b operators.Batched[*ports.Delivery]) error {
			for _, d := range b.Values {
				if err := handleMsg(d.Payload, &lat); err != nil {
					return err
				}
			}
			settled(b.Len())
			return nil
		})
	} else {
		flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error {
			if err := handleMsg(d.Payload, &lat); err != nil {
				return err
			}
			settled(1)
			return nil
		})
	}
	if err := p.Start(ctx); err != nil {
		return Result{}, err
	}
	defer p.Stop(context.Background())
	var m Meter
	m.Start()
	err = produce(ctx, cfg, window, func(ctx context.Context, payloads [][]byte) error {
		msgs := make([]ports.Message, len(payloads))
		for i, pl := range payloads {
			msgs[i] = ports.Message{Topic: "bench", Payload: pl, Headers: ports.Headers{ports.HeaderContentType: "application/json"}}
		}
		return a.Send(ctx, msgs...)
	})
	if err != nil {
		return Result{}, err
	}
	if err := waitDone(ctx, name, finished, &done, cfg.N); err != nil {
		return Result{}, err
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	note := "Send → flow → Sink → ACK (coalesced)"
	if batch {
		note = fmt.Sprintf("Send → flow → batch %d → Sink → multiple-ACK", cfg.Batch)
	}
	return Result{Name: name, Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99, Note: note}, nil
}
