package amqp

import (
	"context"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// handle is the settlement handle of one delivery.
type handle struct {
	c       *consumer
	tag     uint64
	settled atomic.Bool
}

// Receive returns the deliveries the broker pushed to the consumer (up to
// max, at least one), blocking until one arrives. It reads the client
// library's delivery channel directly; the broker bounds what it pushes
// by the prefetch (spec.InFlight). While the channel is being
// re-established after a loss, Receive waits for the new one.
func (s *subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	if max < 1 {
		max = 1
	}
	for {
		c, ready := s.current()
		if c == nil {
			select {
			case <-ready:
				continue
			case <-s.stopCh:
				return nil, ports.ErrClosed
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		var first amqp.Delivery
		var ok bool
		select {
		case first, ok = <-c.deliveries:
		case <-s.stopCh:
			return nil, ports.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !ok {
			s.lose(c) // the supervisor reports it and re-establishes
			continue
		}
		out := s.take(c, first, max)
		if len(out) > 0 {
			return out, nil
		}
	}
}

// take converts first and whatever else is already waiting (up to limit)
// and registers their tags as outstanding.
func (s *subscription) take(c *consumer, first amqp.Delivery, limit int) []*ports.Delivery {
	// Sized for what is already waiting: the broker pushes deliveries one
	// or two at a time when the consumer keeps up, and a slice sized for
	// the whole prefetch on every call was most of the adapter's garbage.
	out := make([]*ports.Delivery, 0, min(limit, max(4, 1+len(c.deliveries))))
	var tagBuf [16]uint64
	tags := tagBuf[:0]
	now := time.Now()
	d := first
	for {
		tags = append(tags, d.DeliveryTag)
		out = append(out, s.convert(c, &d, now))
		if len(out) >= limit {
			break
		}
		var ok bool
		select {
		case d, ok = <-c.deliveries:
		default:
		}
		if !ok {
			break
		}
	}
	c.acks.received(tags...)
	return out
}

// convert builds the ports.Delivery of d. An envelope that cannot be read
// (a malformed redelivery count) sets Delivery.Err: the core dead-letters
// the delivery as poison without handing it to the pipeline.
func (s *subscription) convert(c *consumer, d *amqp.Delivery, now time.Time) *ports.Delivery {
	dec := decode(d)
	id, src := ports.IdentityFromHeaders(dec.headers) // message-id or ce-id; none without
	return &ports.Delivery{
		Message: ports.Message{
			Topic:   s.spec.Topic,
			Key:     dec.headers[ports.HeaderPartitionKey],
			Payload: d.Body,
			Headers: dec.headers,
		},
		ID:              id,
		IDSource:        src,
		RedeliveryCount: dec.requeues + dec.returns,
		Facts:           dec.facts,
		ReceivedAt:      now,
		Err:             dec.err,
		Handle:          &handle{c: c, tag: d.DeliveryTag},
	}
}
