package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/ports"
)

// The rocketmq suite runs against ROCKETMQ_ENDPOINT (a RocketMQ 5 proxy,
// host:8081) when set, else against rocketmqtest, the in-process RocketMQ 5
// gRPC protocol peer, started once in the parent and shared by every
// contender process:
//
//	go run ./tck/bench -adapter rocketmq
//
// Both contenders use the official v5 client the same way: one confirmed
// Send per message from 8 concurrent publishers (the client has no batch
// send) while consuming, SimpleConsumer.Receive of up to 32 messages with
// the same invisible duration, and one AckMessage RPC per message (the
// client has no batch ack) with up to 32 acks in flight; so the ratio shows
// what the adapter and flow add over the client. On the peer the figures
// measure client, adapter and peer on one machine, not Apache RocketMQ.
func init() {
	t := target{open: openRocketMQ, publishers: 8, chunk: 1}
	register(Suite{
		Name:     "rocketmq",
		About:    "confirmed publish and consume concurrently on a fresh topic (ROCKETMQ_ENDPOINT, else the rocketmqtest protocol peer)",
		DefaultN: 5000,
		Setup: func(context.Context, Config) (Env, func(), error) {
			if ep := os.Getenv("ROCKETMQ_ENDPOINT"); ep != "" {
				return Env{"endpoint": ep}, func() {}, nil
			}
			b, err := rocketmqtest.Start()
			if err != nil {
				return nil, nil, err
			}
			return Env{"endpoint": b.Endpoint(), "peer": "rocketmqtest"}, func() { _ = b.Close() }, nil
		},
		Contenders: []Contender{
			{Name: "rocketmq-client", Run: runRocketMQClient},
			{Name: "rocketmq", Run: t.runPipeline(false)},
		},
		Ratios: []Ratio{
			{Label: "rocketmq/best-raw", Num: "rocketmq", Den: []string{"rocketmq-client"}},
		},
	})
}

const rocketmqBenchInvisible = 30 * time.Second

func openRocketMQ(ctx context.Context, env Env, cfg Config) (ports.Adapter, ports.SubscriptionSpec, func(), error) {
	a, err := rocketmq.New(ctx, rocketmq.Options{Endpoint: env["endpoint"], InvisibleDuration: rocketmqBenchInvisible,
		AwaitDuration: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, ports.SubscriptionSpec{}, nil, err
	}
	spec := ports.SubscriptionSpec{Topic: ports.Topic(benchTopic()), Group: "bench", InFlight: cfg.InFlight}
	return a, spec, func() { _ = a.Close(context.Background()) }, nil
}

// runRocketMQClient is the baseline: the v5 client alone.
func runRocketMQClient(ctx context.Context, env Env, cfg Config) (Result, error) {
	topic := benchTopic()
	conf := func(group string) *rmq.Config {
		return &rmq.Config{Endpoint: env["endpoint"], ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
	}
	consumer, err := rmq.NewSimpleConsumer(conf("bench"), rmq.WithSimpleAwaitDuration(time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		return Result{}, err
	}
	if err := consumer.Start(); err != nil {
		return Result{}, fmt.Errorf("start consumer: %w", err)
	}
	defer consumer.GracefulStop()
	producer, err := rmq.NewProducer(conf(""), rmq.WithTopics(topic))
	if err != nil {
		return Result{}, err
	}
	if err := producer.Start(); err != nil {
		return Result{}, fmt.Errorf("start producer: %w", err)
	}
	defer producer.GracefulStop()

	tl := newTally(cfg.N)
	m := newMeter(tl)
	consumed := make(chan error, 1)
	go func() {
		sem := make(chan struct{}, 32)
		var wg sync.WaitGroup
		var failed error
		var mu sync.Mutex
		for got := 0; got < cfg.N; {
			mvs, err := consumer.Receive(ctx, int32(min(32, cfg.InFlight)), rocketmqBenchInvisible)
			if err != nil {
				var st *rmq.ErrRpcStatus
				if errors.As(err, &st) && st.Code == 40401 {
					continue
				}
				consumed <- err
				return
			}
			for _, mv := range mvs {
				m.begin()
				i, err := handleJSON(mv.GetBody())
				if err != nil {
					consumed <- err
					return
				}
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					if err := consumer.Ack(ctx, mv); err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
						return
					}
					tl.mark(i)
				})
				got++
			}
		}
		wg.Wait()
		consumed <- failed
	}()
	padding := pad(cfg.Payload)
	const publishers = 8
	var pwg sync.WaitGroup
	perr := make(chan error, publishers)
	for w := range publishers {
		pwg.Go(func() {
			for i := w; i < cfg.N; i += publishers {
				if _, err := producer.Send(ctx, &rmq.Message{Topic: topic, Body: encodeMsg(i, padding)}); err != nil {
					perr <- err
					return
				}
			}
		})
	}
	pwg.Wait()
	close(perr)
	if err := <-perr; err != nil {
		return Result{}, err
	}
	if err := <-consumed; err != nil {
		return Result{}, err
	}
	return finishNote(m, "rocketmq-client", "client Send ×8 → Receive(32) → Unmarshal → map → Ack (32 in flight)")
}
