package mem

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// The in-process broker settles natively: the portable layer has checked
// each handle (once, on this subscription) and calls one of these per
// settlement. Each never blocks on anything but short locks.

// SendAcks removes the messages.
func (s *subscription) SendAcks(_ context.Context, hs []any) error {
	return s.settle(hs, func(*delivery) {})
}

// SendRequeues puts each message back at the end of its queue with its
// redelivery count incremented by one — at once when delay is zero,
// otherwise through the broker's scheduler when delay has passed.
func (s *subscription) SendRequeues(_ context.Context, hs []any, delay time.Duration) error {
	return s.settle(hs, func(x *delivery) { s.requeueLocked(x.it, delay) })
}

// SendDrops removes the messages of a best-effort subscription that a
// requeue or dead letter would have kept, counted in QueueStats.Dropped.
func (s *subscription) SendDrops(_ context.Context, hs []any) error {
	return s.settle(hs, func(*delivery) { s.q.dropped++ })
}

// settle applies fn to every delivery of hs and removes it from the
// in-flight list, all or nothing.
func (s *subscription) settle(hs []any, fn func(*delivery)) error {
	q := s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if s.stopped {
		return ports.ErrClosed
	}
	for i, h := range hs {
		if x, ok := h.(*delivery); !ok || x.sub != s || x.state != inFlight {
			return fmt.Errorf("settle delivery #%d of %d: %w", i, len(hs), ErrAlreadySettled)
		}
	}
	for _, h := range hs {
		x := h.(*delivery)
		s.unlinkLocked(x)
		x.state = settled
		fn(x)
	}
	return nil
}

// requeueLocked puts it back with one more redelivery.
func (s *subscription) requeueLocked(it item, delay time.Duration) {
	q := s.q
	it.redeliveries++
	if delay <= 0 {
		q.ready.PushBack(it)
		q.wakeLocked()
		return
	}
	b := s.c.b
	if _, err := b.sched.At(b.clock.Now().Add(delay), func() { q.requeued(it) }); err == nil {
		q.delayed++
	}
	// else the broker is closing and drops everything it holds.
}

// SendDeadLetters publishes a copy of each message to
// ports.DeadLetterTopic of its topic, with HeaderDeadLetterReason
// (disp.ReasonText, or "no reason given"), HeaderDeadLetterTopic (the
// logical topic) and HeaderAttempts (disp.Attempts, or the redelivery
// count + 1 when zero), then removes the originals. While
// [Broker.FailDeadLetters] is on the publish fails with an error wrapping
// ports.ErrUnconfirmed and the originals stay in flight.
func (s *subscription) SendDeadLetters(_ context.Context, hs []any, disp ports.Disposition) error {
	b := s.c.b
	switch {
	case b.closed.Load():
		return ports.ErrClosed
	case b.failDeadLetters.Load():
		return fmt.Errorf("dead-letter publish to %q: %w", string(ports.DeadLetterTopic(s.topic)), ports.ErrUnconfirmed)
	}
	for _, h := range hs {
		x, ok := h.(*delivery)
		if !ok || x.sub != s {
			return fmt.Errorf("dead letter: %w", ErrForeignDelivery)
		}
		dl := s.deadLetterCopy(x, disp)
		dl.topic = s.c.physical(dl.topic)
		b.route(s.q.key.ns, &dl)
	}
	return s.SendAcks(context.Background(), hs)
}

// deadLetterCopy builds the message published to the dead-letter topic
// with the kit's header rules.
func (s *subscription) deadLetterCopy(x *delivery, disp ports.Disposition) message {
	m := &x.it.msg
	id, src := ports.IdentityFromHeaders(m.headers)
	pd := ports.Delivery{Message: ports.Message{Topic: s.topic, Key: m.key, Payload: m.payload, Headers: m.headers}, ID: id, IDSource: src, RedeliveryCount: x.it.redeliveries}
	c := kit.DeadLetterCopy(&pd, disp)
	return message{topic: c.Topic, key: c.Key, id: id, payload: c.Payload, headers: c.Headers}
}
