package main

import (
	"context"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
)

// runWatermill is a Watermill router over watermill-amqp with its
// default durable queue config (prefetch 1, one ack per message, a
// channel per Publish) plus ConfirmDelivery, since the workload publishes
// with confirms. The producers are the same as the adapter's.
func (b *amqpBench) runWatermill(ctx context.Context, cfg Config) (Result, error) {
	topic := b.namespace("watermill")
	wcfg := wamqp.NewDurableQueueConfig(b.url)
	wcfg.Publish.ConfirmDelivery = true
	logger := watermill.NopLogger{}
	pub, err := wamqp.NewPublisher(wcfg, logger)
	if err != nil {
		return Result{}, err
	}
	defer pub.Close()
	sub, err := wamqp.NewSubscriber(wcfg, logger)
	if err != nil {
		return Result{}, err
	}
	defer sub.Close()
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return Result{}, err
	}
	var lat Latencies
	var done atomic.Int64
	finished := make(chan struct{})
	window := make(chan struct{}, maxOutstanding(cfg))
	router.AddConsumerHandler("bench", topic, sub, func(msg *message.Message) error {
		if err := handleMsg(msg.Payload, &lat); err != nil {
			return err
		}
		<-window
		if done.Add(1) == int64(cfg.N) {
			close(finished)
		}
		return nil
	})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(rctx) }()
	defer func() { router.Close(); <-ran }()
	select {
	case <-router.Running():
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	defer func() {
		if c, err := sub.Connection().Channel(); err == nil {
			_, _ = c.QueueDelete(topic, false, false, false)
			c.Close()
		}
	}()
	var m Meter
	m.Start()
	err = produce(ctx, cfg, window, func(_ context.Context, payloads [][]byte) error {
		msgs := make([]*message.Message, len(payloads))
		for i, pl := range payloads {
			msgs[i] = message.NewMessage(watermill.NewUUID(), pl)
		}
		return pub.Publish(topic, msgs...)
	})
	if err != nil {
		return Result{}, err
	}
	if err := waitDone(ctx, "watermill", finished, &done, cfg.N); err != nil {
		return Result{}, err
	}
	el, allocs := m.Stop(cfg.N)
	p50, p99 := lat.Percentiles()
	return Result{Name: "watermill", Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99,
		Note: "watermill-amqp durable queue config + confirms → Router → handler → ack"}, nil
}
