package mem

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// subscription is one consumer of a queue, a driver.Subscription with
// native requeue, dead letter and best-effort drops. The portable layer
// bounds what it asks for by InFlight, settles each handle once and
// closes it after the last ReceiveBatch and settlement. Fields below done
// are guarded by q.mu.
type subscription struct {
	c     *conn
	q     *queue
	topic ports.Topic       // the logical topic, carried by its deliveries
	facts map[string]string // shared by its deliveries, read-only
	done  chan struct{}     // closed by Close

	recs       []driver.Record // ReceiveBatch's result, reused (one caller at a time)
	head, tail *delivery       // unsettled deliveries in delivery order
	free       *delivery       // settled deliveries, reused as handles (linked by next)
	receiving  bool            // in ReceiveBatch: counted in q.receivers
	stopped    bool
}

// delivery is a handed-out record's driver handle.
type delivery struct {
	sub        *subscription
	it         item
	prev, next *delivery
}

func newSubscription(c *conn, q *queue, spec ports.SubscriptionSpec) *subscription {
	facts := map[string]string{"queue": q.key.String(), "mode": spec.Mode.String()}
	if spec.Mode == ports.Broadcast {
		facts["instance"] = spec.Instance
	}
	return &subscription{c: c, q: q, topic: spec.Topic, facts: facts, done: make(chan struct{})}
}

// ReceiveBatch blocks until the queue has a ready message (and, in a
// single-active group, s is the active consumer: the first to receive,
// until it stops), then returns up to max of them in queue order, dropping
// those past their retention. Competing consumers waiting together each
// take a fair share of what is ready. Headers, Payload and Facts are
// shared with other deliveries and read-only. It returns ctx.Err() when
// ctx is done and ports.ErrClosed after Close; nothing else.
func (s *subscription) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := s.q
	q.mu.Lock()
	for {
		if s.stopped {
			s.countLocked(false)
			q.mu.Unlock()
			return nil, ports.ErrClosed
		}
		if q.single && q.active == nil {
			q.active = s
		}
		eligible := !q.single || q.active == s
		s.countLocked(eligible)
		if q.ready.Len() > 0 && eligible {
			now := s.c.b.clock.Now()
			if out := s.takeLocked(min(max, (q.ready.Len()+q.receivers-1)/q.receivers), now); len(out) > 0 {
				s.countLocked(false)
				q.mu.Unlock()
				return out, nil
			}
			continue // every one it took had expired
		}
		if q.pushed == nil {
			q.pushed = make(chan struct{})
		}
		pushed := q.pushed
		q.mu.Unlock()
		select {
		case <-pushed:
		case <-s.done: // the loop returns ErrClosed
		case <-ctx.Done():
			q.mu.Lock()
			s.countLocked(false)
			q.mu.Unlock()
			return nil, ctx.Err()
		}
		q.mu.Lock()
	}
}

// countLocked records whether s is in ReceiveBatch and may take messages
// (q.receivers, the share of competing consumers).
func (s *subscription) countLocked(receiving bool) {
	switch {
	case s.receiving == receiving:
	case receiving:
		s.q.receivers++
	default:
		s.q.receivers--
	}
	s.receiving = receiving
}

// takeLocked pops up to n ready items and hands them out as records,
// dropping the expired ones (so it may hand out fewer, even none).
func (s *subscription) takeLocked(n int, now time.Time) []driver.Record {
	if cap(s.recs) < n {
		s.recs = make([]driver.Record, n)
	}
	out := s.recs[:0]
	for len(out) < n {
		it, ok := s.q.ready.PopFront()
		if !ok {
			break
		}
		if it.msg.expired(now) {
			s.q.dropped++
			continue
		}
		x := s.free
		if x != nil {
			s.free = x.next
		} else {
			x = &delivery{sub: s}
		}
		x.it = it
		m := &x.it.msg
		out = append(out, driver.Record{
			Message:         ports.Message{Topic: s.topic, Key: m.key, Payload: m.payload, Headers: m.headers, QoS: m.qos},
			RedeliveryCount: it.redeliveries,
			Facts:           s.facts,
			ReceivedAt:      now,
			Handle:          x,
		})
		x.prev, x.next = s.tail, nil
		if s.tail != nil {
			s.tail.next = x
		} else {
			s.head = x
		}
		s.tail = x
	}
	s.q.inFlight += len(out)
	s.q.roomLocked()
	return out
}

// unlinkLocked removes x from the unsettled list.
func (s *subscription) unlinkLocked(x *delivery) {
	if x.prev != nil {
		x.prev.next = x.next
	} else {
		s.head = x.next
	}
	if x.next != nil {
		x.next.prev = x.prev
	} else {
		s.tail = x.prev
	}
	x.prev, x.next = nil, nil
	s.q.inFlight--
}

// Close stops the subscription: a blocked ReceiveBatch returns
// ports.ErrClosed, and every unsettled delivery goes back to the front of
// the queue in delivery order, its redelivery count incremented (it was
// delivered once more); in a single-active group the next consumer to
// receive takes over. It acks nothing. The last consumer of a Broadcast
// queue deletes it (InstanceTTL 0) or arms its expiry.
func (s *subscription) Close(context.Context) error {
	q := s.q
	q.mu.Lock()
	if s.stopped {
		q.mu.Unlock()
		return nil
	}
	s.stopped = true
	close(s.done)
	returned := s.tail != nil || q.active == s
	for x := s.tail; x != nil; x = s.tail {
		s.unlinkLocked(x)
		x.it.redeliveries++
		q.ready.PushFront(x.it)
	}
	if q.active == s {
		q.active = nil // a standing-by consumer takes over
	}
	if returned {
		q.wakeLocked()
	}
	q.mu.Unlock()
	s.c.b.leave(q)
	return nil
}

// SendAcks removes the messages.
func (s *subscription) SendAcks(_ context.Context, hs []any) error {
	return s.settle(hs, nil)
}

// SendRequeues puts each message back at the end of its queue with one
// more redelivery, at once or through the broker's scheduler once delay
// has passed.
func (s *subscription) SendRequeues(_ context.Context, hs []any, delay time.Duration) error {
	q, b := s.q, s.c.b
	return s.settle(hs, func(x *delivery) {
		it := x.it
		it.redeliveries++
		if delay <= 0 {
			q.ready.PushBack(it)
			q.wakeLocked()
		} else if _, err := b.sched.At(b.clock.Now().Add(delay), func() { q.requeued(it) }); err == nil {
			q.delayed++
		} // else the broker is closing and drops what it holds
	})
}

// SendDrops removes the messages of a best-effort subscription that a
// requeue or dead letter would have kept, counted in QueueStats.Dropped.
func (s *subscription) SendDrops(_ context.Context, hs []any) error {
	return s.settle(hs, func(*delivery) { s.q.dropped++ })
}

// settle applies fn to each delivery of hs and removes it from the
// unsettled list.
func (s *subscription) settle(hs []any, fn func(*delivery)) error {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	if s.stopped {
		return ports.ErrClosed
	}
	for _, h := range hs {
		x := h.(*delivery)
		s.unlinkLocked(x)
		if fn != nil {
			fn(x)
		}
		x.it, x.next, s.free = item{}, s.free, x
	}
	return nil
}

// SendDeadLetters publishes each message's dead-letter copy (kit's header
// rules) to ports.DeadLetterTopic of its topic, then removes the
// originals. While [Broker.FailDeadLetters] is on it fails with
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
		x := h.(*delivery)
		m := &x.it.msg
		id, src := ports.IdentityFromHeaders(m.headers)
		d := ports.Delivery{Message: ports.Message{Topic: s.topic, Key: m.key, Payload: m.payload, Headers: m.headers}, ID: id, IDSource: src, RedeliveryCount: x.it.redeliveries}
		c := kit.DeadLetterCopy(&d, disp)
		b.route(s.q.key.ns, &message{topic: s.c.physical(c.Topic), key: c.Key, payload: c.Payload, headers: c.Headers})
	}
	return s.SendAcks(context.Background(), hs)
}
