package pulsar

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/kit"
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
//   - DeadLetter publishes a copy of each message (kit.DeadLetterCopy: the
//     reason, source topic and attempts headers) to the dead-letter topic,
//     waits for every receipt, and only then acknowledges the originals. A
//     failed dead-letter publish returns an error and acknowledges nothing.
//
// The kit.Settler carries this out. A delivery that did not come from this
// subscription fails the whole call with an error wrapping ports.ErrInvalid
// before anything is settled; a delivery settled before returns
// ports.ErrAlreadyCompleted (same action) or ports.ErrConflict.
func (s *Subscription) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	if len(ds) == 0 {
		return nil
	}
	d = kit.BestEffortDisposition(s.spec, d) // a non-persistent message is never requeued or dead-lettered
	if !s.enter() {
		return ports.ErrClosed
	}
	defer s.leave()
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.settler.Settle(ctx, ds, d)
}

// settleBroker is what kit.Settler needs from Pulsar: the ack, the native
// requeue (a negative acknowledgement with a per-call delay) and the
// confirmed publish of dead-letter copies.
type settleBroker struct{ s *Subscription }

var (
	_ kit.Broker        = settleBroker{}
	_ kit.NativeRequeue = settleBroker{}
)

// newSettler returns the kit.Settler of s; a delivery's claim lives in its
// handle, which must come from s.
func newSettler(s *Subscription) *kit.Settler {
	return &kit.Settler{Broker: settleBroker{s}, Tracker: kit.Tracker{Lookup: func(d *ports.Delivery) (*kit.Claim, error) {
		h, ok := d.Handle.(*handle)
		if !ok || h.sub != s {
			return nil, &ports.ValueError{Field: "Delivery.Handle", Reason: fmt.Sprintf("delivery %s was not received by this subscription (%s)", d.ID, s.name)}
		}
		return &h.claim, nil
	}}}
}

func (b settleBroker) Ack(ctx context.Context, ds []*ports.Delivery) error {
	msgs, err := b.s.messages(ds)
	if err != nil {
		return err
	}
	return b.s.ack(ctx, msgs)
}

// Requeue negatively acknowledges each message with the delay (see
// requeueDelays; a message reassembled from chunks by every chunk, see
// nackChunked); the broker redelivers it with RedeliveryCount+1.
func (b settleBroker) Requeue(_ context.Context, ds []*ports.Delivery, delay time.Duration) error {
	msgs, err := b.s.messages(ds)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if isChunked(m.ID()) {
			b.s.nackChunked(m, delay)
			continue
		}
		b.s.delays.nack(b.s.consumer, m, delay)
	}
	return nil
}

// Publish publishes the dead-letter copies and waits for every receipt.
func (b settleBroker) Publish(ctx context.Context, msgs []ports.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	wms := make([]*message.Message, len(msgs))
	for i := range msgs {
		wm := toWatermill(&msgs[i])
		wm.SetContext(ctx)
		wms[i] = wm
	}
	topic, err := b.s.a.physicalTopic(msgs[0].Topic)
	if err != nil {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return b.s.a.pub.publish(topic, wms)
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
		// A message reassembled from chunks goes by AckIDList even alone:
		// the client's AckID of a chunk message id acks each chunk through
		// its ack-grouping tracker, without waiting for the broker's
		// answer, while AckIDList acks every chunk in one command with a
		// response.
		if len(ids) == 1 && !isChunked(ids[0]) {
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
