package amqp

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Settle carries out one disposition for every delivery in ds:
//
//   - Ack: the delivery tags are acked (coalesced into multiple-acks where
//     they are contiguous; see acker).
//   - Requeue: a copy of each message, with HeaderRedeliveryCount set to
//     RedeliveryCount+1, is published with a confirm to the subscription's
//     own queue — at its tail, or through a delay queue when Delay > 0 —
//     and only when every copy is confirmed are the originals acked. So
//     the count is exact (it travels with the message), a failing message
//     does not loop at the head of the queue, and a failed publish leaves
//     the originals unsettled.
//   - DeadLetter: a copy with the dead-letter headers (reason, source
//     topic, attempts) is published with a confirm to the "<topic>.dlq"
//     topic (mandatory: it must reach a queue); the originals are acked
//     only after every confirm. A failed or unroutable dead-letter publish
//     returns an error and acks nothing.
//
// A batch has one outcome: if any copy is not confirmed, no original is
// acked (the copies that were confirmed become duplicates, as at-least-once
// allows). Deliveries from a channel that was lost cannot be settled any
// more; Settle returns ErrDeliveryLost and the broker redelivers them.
func (s *subscription) Settle(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	if len(ds) == 0 {
		return nil
	}
	if !s.enter() {
		return ports.ErrClosed
	}
	defer s.exit()
	var one [1]*handle // the core settles one delivery at a time: no allocation then
	hs, err := s.claim(ds, one[:0])
	if err != nil {
		return err
	}
	switch disp.Action {
	case ports.Ack:
	case ports.Requeue, ports.DeadLetter:
		if s.bestEffort {
			// QoS BestEffort: never requeued or dead-lettered by sluice
			// (ports.BestEffort); the delivery is dropped with an ack.
			s.a.opts.Logger.Debug("sluice amqp: best-effort delivery dropped instead of "+disp.Action.String(), "queue", s.queue, "count", len(ds))
			break
		}
		if disp.Action == ports.DeadLetter {
			err = s.publishCopies(ctx, ds, s.deadLetterItem, disp)
			break
		}
		if err = s.bindRequeueRoute(ctx, disp); err == nil {
			err = s.publishCopies(ctx, ds, s.requeueItem, disp)
		}
	default:
		err = &ports.ValueError{Field: "Disposition.Action", Reason: fmt.Sprintf("unknown action %v", disp.Action)}
	}
	if err == nil {
		err = s.ack(hs)
	}
	if err != nil {
		for _, h := range hs {
			h.settled.Store(false)
		}
	}
	return err
}

// claim checks that every delivery belongs to a live channel of this
// subscription and marks it settled (so a second Settle fails).
func (s *subscription) claim(ds []*ports.Delivery, hs []*handle) ([]*handle, error) {
	cur, _ := s.current()
	fail := func(err error) ([]*handle, error) {
		for _, h := range hs {
			h.settled.Store(false)
		}
		return nil, err
	}
	for _, d := range ds {
		h, ok := d.Handle.(*handle)
		if !ok || h.c == nil || h.c.sub != s {
			return fail(&ports.ValueError{Field: "Delivery.Handle", Reason: fmt.Sprintf("message %q was not received by this subscription", d.ID)})
		}
		if h.c != cur {
			return fail(fmt.Errorf("settle %q: %w", d.ID, ErrDeliveryLost))
		}
		if !h.settled.CompareAndSwap(false, true) {
			return fail(fmt.Errorf("settle %q: %w", d.ID, ports.ErrAlreadyCompleted))
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// ack acks the claimed deliveries.
func (s *subscription) ack(hs []*handle) error {
	c := hs[0].c
	var err error
	if len(hs) == 1 {
		err = c.acks.settle(hs[0].tag)
	} else {
		tags := make([]uint64, len(hs))
		for i, h := range hs {
			tags[i] = h.tag
		}
		err = c.acks.settle(tags...)
	}
	if err != nil {
		return errors.Join(err, ErrDeliveryLost)
	}
	return nil
}

// publishCopies publishes one copy per delivery and waits for every
// confirm.
func (s *subscription) publishCopies(ctx context.Context, ds []*ports.Delivery, mk func(*ports.Delivery, ports.Disposition) item, disp ports.Disposition) error {
	items := make([]item, len(ds))
	for i, d := range ds {
		items[i] = mk(d, disp)
	}
	var errs []error
	for i, err := range s.a.pub.publishAll(ctx, items) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%v %q: %w", disp.Action, ds[i].ID, err))
		}
	}
	return errors.Join(errs...)
}

// requeueItem is the copy of d that goes back to this subscription's queue
// with its redelivery count incremented.
func (s *subscription) requeueItem(d *ports.Delivery, disp ports.Disposition) item {
	// The delay travels through the delay queue, not as a header.
	h := kit.RequeueCopy(d, 0).Headers
	it := item{exch: "", key: s.queue, pub: encode(h, d.Payload), mandatory: true}
	if disp.Delay > 0 {
		it.key = route(s.queue)
		s.a.pub.delayed(&it, disp.Delay)
	}
	return it
}

// deadLetterItem is the copy of d for the dead-letter topic. Its
// redelivery count starts again at zero there.
func (s *subscription) deadLetterItem(d *ports.Delivery, disp ports.Disposition) item {
	dl := *d
	dl.Topic = s.spec.Topic
	h := kit.DeadLetterCopy(&dl, disp).Headers
	exch, key := s.a.topo.target(ports.DeadLetterTopic(s.spec.Topic))
	if s.a.faults.deadLetters.Load() {
		key = faultKey
	}
	return item{exch: exch, key: key, pub: encode(h, d.Payload), mandatory: true}
}
