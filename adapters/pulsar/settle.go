package pulsar

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/ports"
)

// Settle implements ports.Subscription:
//
//   - Ack acknowledges every message id in one broker command (AckID, or
//     AckIDList for a batch) and returns when the broker answered.
//   - Requeue negatively acknowledges each message with Disposition.Delay
//     (see requeueDelays); the broker redelivers it with RedeliveryCount+1.
//     Nack is local until the delay is over, so Requeue reports no broker
//     error; if the process dies first, the message is redelivered anyway.
//   - DeadLetter publishes a copy of each message to the dead-letter topic
//     with the reason, source topic and attempts headers, waits for every
//     receipt, and only then acknowledges the originals. A failed
//     dead-letter publish returns an error and acknowledges nothing.
//
// A delivery that did not come from this subscription fails the whole call
// with an error wrapping ports.ErrInvalid before anything is settled.
func (s *Subscription) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	if len(ds) == 0 {
		return nil
	}
	if !s.enter() {
		return ports.ErrClosed
	}
	defer s.leave()
	msgs, err := s.messages(ds)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch d.Action {
	case ports.Ack:
		return s.ack(ctx, msgs)
	case ports.Requeue:
		for _, m := range msgs {
			s.delays.nack(s.consumer, m, d.Delay)
		}
		return nil
	case ports.DeadLetter:
		if err := s.deadLetter(ctx, ds, d); err != nil {
			return err
		}
		return s.ack(ctx, msgs)
	}
	return &ports.ValueError{Field: "Disposition.Action", Reason: fmt.Sprintf("unknown action %v", d.Action)}
}

// messages returns the Pulsar messages behind ds.
func (s *Subscription) messages(ds []*ports.Delivery) ([]pulsarclient.Message, error) {
	msgs := make([]pulsarclient.Message, len(ds))
	for i, d := range ds {
		h, ok := d.Handle.(*handle)
		if !ok || h.sub != s {
			return nil, &ports.ValueError{Field: "Delivery.Handle", Reason: fmt.Sprintf("delivery %s was not received by this subscription (%s)", d.ID, s.name)}
		}
		msgs[i] = h.msg
	}
	return msgs, nil
}

// ack acknowledges msgs in one command and waits for the broker's answer
// (the consumer runs with AckWithResponse). When ctx ends first it returns
// an error saying the outcome is unknown: the ack may still land.
func (s *Subscription) ack(ctx context.Context, msgs []pulsarclient.Message) error {
	ids := make([]pulsarclient.MessageID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID()
	}
	call := func() error {
		var err error
		if len(ids) == 1 {
			err = s.consumer.AckID(ids[0])
		} else {
			err = s.consumer.AckIDList(ids)
		}
		if err != nil {
			return fmt.Errorf("pulsar: ack %d message(s) on %s: %w", len(ids), s.name, err)
		}
		return nil
	}
	if ctx.Done() == nil {
		return call()
	}
	res := make(chan error, 1)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		res <- call()
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return fmt.Errorf("pulsar: ack on %s: outcome unknown: %w", s.name, ctx.Err())
	}
}

// deadLetter publishes a copy of every delivery to the dead-letter topic
// and returns nil only when all were confirmed.
func (s *Subscription) deadLetter(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	dlq := ports.DeadLetterTopic(s.spec.Topic)
	wms := make([]*message.Message, len(ds))
	for i, del := range ds {
		m := ports.Message{Topic: dlq, Key: del.Key, Payload: del.Payload, Headers: del.Headers.Clone()}
		if m.Headers == nil {
			m.Headers = ports.Headers{}
		}
		if m.Headers[ports.HeaderID] == "" {
			m.Headers[ports.HeaderID] = del.ID
		}
		m.Headers[ports.HeaderDeadLetterReason] = d.ReasonText()
		m.Headers[ports.HeaderDeadLetterTopic] = string(s.spec.Topic)
		m.Headers[ports.HeaderAttempts] = strconv.Itoa(d.Attempts)
		wm := toWatermill(&m)
		wm.SetContext(ctx)
		wms[i] = wm
	}
	errs := s.a.pub.publish(s.a.names.topic(dlq), wms)
	if errs == nil {
		return nil
	}
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("message %s: %w", ds[i].ID, err))
		}
	}
	return fmt.Errorf("pulsar: dead-letter publish to %s not confirmed, originals left unacknowledged: %w", dlq, errors.Join(failed...))
}
