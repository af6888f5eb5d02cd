package mem

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Settle applies d to every delivery in ds, all or nothing: if any of them
// is nil, foreign ([ErrForeignDelivery]) or not in flight
// ([ErrAlreadySettled]), or d is invalid (ports.ErrInvalid), nothing is
// settled.
//
//   - Ack removes the messages.
//   - Requeue puts each message back at the end of its queue with its
//     redelivery count incremented by one — at once when d.Delay is zero,
//     otherwise through the broker's scheduler when d.Delay has passed.
//   - DeadLetter publishes a copy of each message to ports.DeadLetterTopic
//     of its topic, with HeaderDeadLetterReason (d.ReasonText, or "no
//     reason given"), HeaderDeadLetterTopic (the logical topic) and
//     HeaderAttempts (d.Attempts, or the redelivery count + 1 when zero),
//     then removes the originals. While [Broker.FailDeadLetters] is on the
//     publish fails: Settle returns an error wrapping ports.ErrUnconfirmed
//     and the originals stay in flight, to be settled again or returned by
//     Stop.
//
// On a best-effort subscription (SubscriptionSpec.QoS BestEffort) Requeue
// and DeadLetter remove the messages as Ack does, counted in
// QueueStats.Dropped: a best-effort message is never requeued or
// dead-lettered.
//
// Settle is safe for concurrent use and never blocks on anything but short
// locks. It returns ctx.Err() when ctx is done before it starts and
// ports.ErrClosed after Stop. An empty ds is a no-op.
func (s *subscription) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	if err := validDisposition(d); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	q := s.q
	q.mu.Lock()
	if s.stopped {
		q.mu.Unlock()
		return ports.ErrClosed
	}
	if err := s.claimLocked(ds); err != nil {
		q.mu.Unlock()
		return err
	}
	if d.Action == ports.DeadLetter && !s.bestEffort {
		q.mu.Unlock()
		return s.deadLetter(ds, d)
	}
	for _, pd := range ds {
		x := pd.Handle.(*delivery)
		s.unlinkLocked(x)
		x.state = settled
		switch {
		case d.Action == ports.Ack:
		case s.bestEffort:
			q.dropped++ // best effort: never requeued or dead-lettered
		case d.Action == ports.Requeue:
			s.requeueLocked(x.it, d)
		}
	}
	if s.waiting {
		s.signal() // a slot was freed
	}
	q.mu.Unlock()
	return nil
}

// claimLocked checks that every delivery of ds is in flight on s and marks
// it settling; on the first bad one it restores the ones it marked.
func (s *subscription) claimLocked(ds []*ports.Delivery) error {
	for i, pd := range ds {
		var err error
		x, ok := handleOf(pd)
		switch {
		case !ok || x.sub != s:
			err = ErrForeignDelivery
		case x.state != inFlight:
			err = ErrAlreadySettled
		}
		if err != nil {
			for _, done := range ds[:i] {
				done.Handle.(*delivery).state = inFlight
			}
			return fmt.Errorf("settle delivery #%d of %d: %w", i, len(ds), err)
		}
		x.state = settling
	}
	return nil
}

func handleOf(pd *ports.Delivery) (*delivery, bool) {
	if pd == nil {
		return nil, false
	}
	x, ok := pd.Handle.(*delivery)
	return x, ok && x != nil && &x.pd == pd
}

// requeueLocked puts it back with one more redelivery.
func (s *subscription) requeueLocked(it item, d ports.Disposition) {
	q := s.q
	it.redeliveries++
	if d.Delay <= 0 {
		q.ready.PushBack(it)
		q.wakeLocked()
		return
	}
	b := s.a.b
	if _, err := b.sched.At(b.clock.Now().Add(d.Delay), func() { q.requeued(it) }); err == nil {
		q.delayed++
	}
	// else the broker is closing and drops everything it holds.
}

// deadLetter publishes the dead-letter copies of ds (already marked
// settling) and then removes the originals, or gives them back on failure.
func (s *subscription) deadLetter(ds []*ports.Delivery, d ports.Disposition) error {
	b := s.a.b
	var err error
	switch {
	case b.closed.Load():
		err = ports.ErrClosed
	case b.failDeadLetters.Load():
		err = fmt.Errorf("dead-letter publish to %q: %w", string(ports.DeadLetterTopic(ds[0].Topic)), ports.ErrUnconfirmed)
	default:
		for _, pd := range ds {
			dl := deadLetterCopy(pd, d)
			dl.topic = s.a.physical(dl.topic)
			b.route(s.q.key.ns, &dl)
		}
	}

	q := s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := len(ds) - 1; i >= 0; i-- {
		x := ds[i].Handle.(*delivery)
		switch {
		case err == nil:
			s.unlinkLocked(x)
			x.state = settled
		case s.stopped: // Stop skipped it: give it back as Stop would have
			s.unlinkLocked(x)
			x.state = settled
			if !q.deleted {
				it := x.it
				it.redeliveries++
				q.ready.PushFront(it)
				q.wakeLocked()
			}
		default:
			x.state = inFlight
		}
	}
	if err == nil && s.waiting {
		s.signal()
	}
	return err
}

// deadLetterCopy builds the message published to the dead-letter topic
// with the kit's header rules.
func deadLetterCopy(pd *ports.Delivery, d ports.Disposition) message {
	m := kit.DeadLetterCopy(pd, d)
	return message{topic: m.Topic, key: m.Key, id: pd.ID, payload: m.Payload, headers: m.Headers}
}

// validDisposition rejects an unknown action or a negative delay.
func validDisposition(d ports.Disposition) error {
	switch d.Action {
	case ports.Ack, ports.Requeue, ports.DeadLetter:
	default:
		return valueError("Disposition.Action", fmt.Sprintf("unknown action %v", d.Action))
	}
	if d.Delay < 0 {
		return valueError("Disposition.Delay", "must not be negative")
	}
	return nil
}
