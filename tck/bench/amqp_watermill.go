package main

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// runAMQPWatermill is a Watermill router over watermill-amqp's durable
// queue config (a classic durable queue: Watermill's own topology) with
// prefetch = in-flight. N messages are pre-published to its queue with
// amqp091-go, encoded by watermill-amqp's marshaler, before the timed
// section.
func runAMQPWatermill(ctx context.Context, env Env, cfg Config) (Result, error) {
	topic := amqpNamespace("watermill")
	wcfg := wamqp.NewDurableQueueConfig(env["url"])
	wcfg.Consume.Qos.PrefetchCount = cfg.InFlight
	logger := watermill.NopLogger{}
	sub, err := wamqp.NewSubscriber(wcfg, logger)
	if err != nil {
		return Result{}, err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(topic); err != nil {
		return Result{}, err
	}
	conn, err := amqp091.Dial(env["url"])
	if err != nil {
		return Result{}, err
	}
	defer conn.Close()
	defer func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(topic, false, false, false)
			_ = ch.Close()
		}
	}()
	var merr error
	marshal := func(body []byte, _ int) amqp091.Publishing {
		p, err := wamqp.DefaultMarshaler{}.Marshal(message.NewMessage(watermill.NewUUID(), body))
		if err != nil {
			merr = err
		}
		return p
	}
	if err := rawPublish(ctx, conn, "", topic, cfg.N, 256, cfg.Payload, marshal, func(int) {}); err != nil || merr != nil {
		return Result{}, fmt.Errorf("pre-publish: %v %v", err, merr)
	}
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		return Result{}, err
	}
	tl := newTally(cfg.N)
	m := newMeter(tl)
	router.AddConsumerHandler("bench", topic, sub, func(msg *message.Message) error {
		m.begin()
		i, err := handleJSON(msg.Payload)
		if err != nil {
			return err
		}
		tl.mark(i) // the ack follows the handler's return
		return nil
	})
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(rctx) }()
	defer func() { _ = router.Close(); <-ran }()
	if err := tl.wait(ctx, "watermill"); err != nil {
		return Result{}, err
	}
	return finishNote(m, "watermill", fmt.Sprintf("Router over watermill-amqp durable queue config, prefetch %d, ack per message", cfg.InFlight))
}
