package amqp

import (
	"context"
	"fmt"
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

// take converts first and whatever else is already waiting (up to max)
// and registers their tags as outstanding.
func (s *subscription) take(c *consumer, first amqp.Delivery, max int) []*ports.Delivery {
	out := make([]*ports.Delivery, 0, min(max, 64))
	tags := make([]uint64, 0, cap(out))
	now := time.Now()
	var bad []*amqp.Delivery
	d := first
	for {
		tags = append(tags, d.DeliveryTag)
		pd, err := s.convert(c, &d, now)
		if err != nil {
			dd := d
			bad = append(bad, &dd)
		} else {
			out = append(out, pd)
		}
		if len(out) >= max {
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
	for _, b := range bad {
		s.poisonOnArrival(c, b)
	}
	return out
}

// convert builds the ports.Delivery of d.
func (s *subscription) convert(c *consumer, d *amqp.Delivery, now time.Time) (*ports.Delivery, error) {
	dec := decode(d)
	if dec.err != nil {
		return nil, dec.err
	}
	pd := &ports.Delivery{
		Message: ports.Message{
			Topic:   s.spec.Topic,
			Key:     dec.headers[ports.HeaderPartitionKey],
			Payload: d.Body,
			Headers: dec.headers,
		},
		ID:              dec.headers[ports.HeaderID],
		RedeliveryCount: dec.requeues + dec.returns,
		Facts:           dec.facts,
		ReceivedAt:      now,
		Handle:          &handle{c: c, tag: d.DeliveryTag},
	}
	return pd, nil
}

// poisonOnArrival handles a delivery whose envelope cannot be read (a
// malformed redelivery count): it never reaches the pipeline. It is
// dead-lettered with the header error as reason — or, with dead-lettering
// off, requeued after Retry.MaxBackoff — and reported on Errors. If that
// fails, it stays unsettled until the channel closes, and is reported.
func (s *subscription) poisonOnArrival(c *consumer, d *amqp.Delivery) {
	dec := decode(d)
	if dec.err == nil {
		dec.err = ports.Poisonf("unreadable envelope")
	}
	h := &handle{c: c, tag: d.DeliveryTag}
	pd := &ports.Delivery{
		Message: ports.Message{Topic: s.spec.Topic, Payload: d.Body, Headers: dec.headers},
		ID:      dec.headers[ports.HeaderID],
		Handle:  h,
	}
	disp := ports.Disposition{Action: ports.DeadLetter, Reason: dec.err, Attempts: 1}
	if s.spec.DisableDeadLetter {
		// The requeued copy carries a valid count again (1), so the
		// message then reaches the pipeline; the report says so.
		disp = ports.Disposition{Action: ports.Requeue, Reason: dec.err, Delay: s.spec.Retry.MaxBackoff}
	}
	ctx, cancel := context.WithTimeout(s.life, s.a.opts.DialTimeout)
	defer cancel()
	err := s.Settle(ctx, []*ports.Delivery{pd}, disp)
	if err != nil {
		s.report(fmt.Errorf("amqp: %s: message %q has a malformed envelope (%v) and could not be %s: %w; it stays unsettled", s.queue, pd.ID, dec.err, disp.Action, err))
		return
	}
	s.report(fmt.Errorf("amqp: %s: message %q has a malformed envelope: %w; %s", s.queue, pd.ID, dec.err, disp.Action))
}
