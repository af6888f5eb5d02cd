package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// runRaw is the baseline: amqp091-go by hand, one ack per message.
func (b *amqpBench) runRaw(ctx context.Context, cfg Config) (Result, error) {
	return b.rawRun(ctx, cfg, "raw", 0, false)
}

// runRawBatch acks each batch of cfg.Batch with one multiple-ack.
func (b *amqpBench) runRawBatch(ctx context.Context, cfg Config) (Result, error) {
	return b.rawRun(ctx, cfg, "raw-batch", cfg.Batch, false)
}

// runRawEnvelope is runRaw publishing the bytes the adapter publishes: a
// message id property and the stamped envelope headers (spec version,
// time). It separates the cost of carrying an envelope from the cost of
// the adapter.
func (b *amqpBench) runRawEnvelope(ctx context.Context, cfg Config) (Result, error) {
	return b.rawRun(ctx, cfg, "raw+env", 0, true)
}

// runRawBatchEnvelope is runRawBatch with the envelope.
func (b *amqpBench) runRawBatchEnvelope(ctx context.Context, cfg Config) (Result, error) {
	return b.rawRun(ctx, cfg, "raw-batch+env", cfg.Batch, true)
}

// rawRun declares the same topology as the adapter (a direct exchange, a
// durable quorum queue bound under the topic), publishes on one connection
// with confirms (up to the window outstanding, confirms read by a
// listener) and consumes on another with the same prefetch, handling and
// acking in one goroutine.
func (b *amqpBench) rawRun(ctx context.Context, cfg Config, name string, batch int, envelope bool) (Result, error) {
	ns := b.namespace(name)
	exchange, queue := ns+".topics", ns+"/bench"
	cconn, err := amqp091.Dial(b.url)
	if err != nil {
		return Result{}, err
	}
	defer cconn.Close()
	pconn, err := amqp091.Dial(b.url)
	if err != nil {
		return Result{}, err
	}
	defer pconn.Close()
	ch, err := cconn.Channel()
	if err != nil {
		return Result{}, err
	}
	if err := ch.ExchangeDeclare(exchange, amqp091.ExchangeDirect, true, false, false, false, nil); err != nil {
		return Result{}, err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		return Result{}, err
	}
	defer func() {
		if c, err := pconn.Channel(); err == nil {
			_, _ = c.QueueDelete(queue, false, false, false)
			_ = c.ExchangeDelete(exchange, false, false)
			c.Close()
		}
	}()
	if err := ch.QueueBind(queue, "bench", exchange, false, nil); err != nil {
		return Result{}, err
	}
	if err := ch.Qos(cfg.InFlight, 0, false); err != nil {
		return Result{}, err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return Result{}, err
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
	consumed := make(chan error, 1)
	go func() { consumed <- rawConsume(deliveries, ch, batch, &lat, settled) }()

	pch, err := pconn.Channel()
	if err != nil {
		return Result{}, err
	}
	if err := pch.Confirm(false); err != nil {
		return Result{}, err
	}
	confirms := pch.NotifyPublish(make(chan amqp091.Confirmation, maxOutstanding(cfg)+1))
	var acked atomic.Int64
	allConfirmed := make(chan error, 1)
	go func() {
		for c := range confirms {
			if !c.Ack {
				allConfirmed <- fmt.Errorf("raw: publish %d nacked", c.DeliveryTag)
				return
			}
			if acked.Add(1) == int64(cfg.N) {
				allConfirmed <- nil
				return
			}
		}
		allConfirmed <- fmt.Errorf("raw: publish channel closed after %d confirms", acked.Load())
	}()

	padding := pad(cfg.Payload)
	var m Meter
	m.Start()
	for i := range cfg.N {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
		p := amqp091.Publishing{Body: encodeMsg(i, padding), DeliveryMode: amqp091.Persistent, ContentType: "application/json"}
		if envelope {
			p.MessageId = ports.NewID()
			p.Headers = amqp091.Table{ports.HeaderSpecVersion: "1.0", ports.HeaderTime: time.Now().UTC().Format(time.RFC3339Nano)}
		}
		err := pch.PublishWithContext(ctx, exchange, "bench", false, false, p)
		if err != nil {
			return Result{}, err
		}
	}
	select {
	case err := <-allConfirmed:
		if err != nil {
			return Result{}, err
		}
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	if err := waitDone(ctx, name, finished, &done, cfg.N); err != nil {
		return Result{}, err
	}
	el, allocs := m.Stop(cfg.N)
	ch.Close() // ends the consumer
	if err := <-consumed; err != nil {
		return Result{}, err
	}
	p50, p99 := lat.Percentiles()
	note := "amqp091 publish+confirms → consume → handle → ack"
	if batch > 0 {
		note = fmt.Sprintf("amqp091 publish+confirms → consume → batch %d → multiple-ack", batch)
	}
	if envelope {
		note += " (envelope bytes)"
	}
	return Result{Name: name, Deliveries: cfg.N, Elapsed: el, AllocsPerDelivery: allocs, P50: p50, P99: p99, Note: note}, nil
}

// rawConsume handles deliveries until the channel closes. With batch > 0
// it handles up to batch deliveries (or what arrived within 5ms) and acks
// them with one multiple-ack of the last tag.
func rawConsume(deliveries <-chan amqp091.Delivery, ch *amqp091.Channel, batch int, lat *Latencies, settled func(int)) error {
	if batch <= 0 {
		for d := range deliveries {
			if err := handleMsg(d.Body, lat); err != nil {
				return err
			}
			if err := ch.Ack(d.DeliveryTag, false); err != nil {
				return nil // closed at the end of the run
			}
			settled(1)
		}
		return nil
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var last uint64
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		if err := ch.Ack(last, true); err != nil {
			return nil
		}
		settled(n)
		n = 0
		return nil
	}
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return nil
			}
			if err := handleMsg(d.Body, lat); err != nil {
				return err
			}
			last = d.DeliveryTag
			n++
			if n == 1 {
				timer.Reset(5 * time.Millisecond)
			}
			if n >= batch {
				timer.Stop()
				if err := flush(); err != nil {
					return err
				}
			}
		case <-timer.C:
			if err := flush(); err != nil {
				return err
			}
		}
	}
}
