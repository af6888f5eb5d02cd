package mem

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// subscription is one consumer of a queue, with native requeue, dead
// letter and drops. Fields below done are guarded by q.mu.
type subscription struct {
	c     *conn
	q     *queue
	topic ports.Topic // logical
	facts ports.Facts
	done  chan struct{} // closed by Close

	recs      []driver.Record // ReceiveBatch's result, reused
	held      []*delivery     // unsettled
	free      []*delivery     // settled, reused as handles
	sent      uint64          // deliveries handed out
	receiving bool            // counted in q.receivers
	stopped   bool
}

// delivery is a handed-out record's driver handle.
type delivery struct {
	it       item
	seq      uint64 // delivery order
	heldSlot int    // index in held
}

func newSubscription(c *conn, q *queue, spec ports.SubscriptionSpec) *subscription {
	facts := ports.FactMap{"queue": q.key.String(), "mode": spec.Mode.String()} // once a subscription
	if spec.Mode == ports.Broadcast {
		facts["instance"] = spec.Instance
	}
	return &subscription{c: c, q: q, topic: spec.Topic, facts: ports.NewFacts(facts), done: make(chan struct{})}
}

// ReceiveBatch waits for ready messages (in a single-active group, until
// s is the active consumer: the first to receive, until it stops) and
// returns up to max (receiveMax at most), in queue order, minus the
// expired ones; competing consumers waiting together share fairly.
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
			if out := s.takeLocked(min(max, receiveMax, (q.ready.Len()+q.receivers-1)/q.receivers), s.c.b.clock.Now()); len(out) > 0 {
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

// receiveMax bounds a receive: in tck/bench's mem suite, 16 ran faster
// than 4, 8, 32, 64 and the whole window (a pipeline's receive loop spent
// less CPU a message, and waited less for a processor).
const receiveMax = 16

// countLocked counts s in q.receivers while it may take messages.
func (s *subscription) countLocked(receiving bool) {
	if s.receiving != receiving {
		s.receiving = receiving
		if receiving {
			s.q.receivers++
		} else {
			s.q.receivers--
		}
	}
}

// takeLocked hands out up to n ready items, dropping expired ones.
func (s *subscription) takeLocked(n int, now time.Time) []driver.Record {
	if cap(s.recs) < n {
		s.recs = make([]driver.Record, n)
	}
	out := s.recs[:0]
	for len(out) < n && s.q.ready.Len() > 0 {
		it := s.q.ready.PopFront()
		if it.msg.expired(now) {
			s.q.dropped++
			continue
		}
		var x *delivery
		if k := len(s.free) - 1; k >= 0 {
			x, s.free = s.free[k], s.free[:k]
		} else {
			x = new(delivery)
		}
		s.sent++
		x.it, x.seq, x.heldSlot = it, s.sent, len(s.held)
		s.held = append(s.held, x)
		m := &x.it.msg
		out = append(out, driver.Record{
			Message:         ports.Message{Topic: s.topic, Key: m.key, Payload: m.payload, Headers: m.headers, QoS: m.qos},
			RedeliveryCount: it.redeliveries,
			Facts:           s.facts,
			ReceivedAt:      now,
			Handle:          x,
		})
	}
	s.q.inFlight += len(out)
	s.q.roomLocked()
	return out
}

// unholdLocked removes x from held.
func (s *subscription) unholdLocked(x *delivery) {
	last := s.held[len(s.held)-1]
	last.heldSlot, s.held[x.heldSlot] = x.heldSlot, last
	s.held[len(s.held)-1] = nil
	s.held = s.held[:len(s.held)-1]
	s.q.inFlight--
}

// Close returns every unsettled delivery to the front of the queue, in
// order and counted as redelivered; it acks nothing.
func (s *subscription) Close(context.Context) error {
	q := s.q
	q.mu.Lock()
	if s.stopped {
		q.mu.Unlock()
		return nil
	}
	s.stopped = true
	close(s.done)
	slices.SortFunc(s.held, func(x, y *delivery) int { return cmp.Compare(y.seq, x.seq) })
	for _, x := range s.held { // the latest first: the earliest ends in front
		x.it.redeliveries++
		q.ready.PushFront(x.it)
	}
	q.inFlight -= len(s.held)
	s.held = nil
	if q.active == s {
		q.active = nil // a standing-by consumer takes over
	}
	q.wakeLocked() // the returned deliveries, or the single-active consumer's turn
	q.mu.Unlock()
	s.c.b.leave(q)
	return nil
}

// SendAcks removes the messages.
func (s *subscription) SendAcks(_ context.Context, hs []any) error {
	return s.settle(hs, func(*delivery) {})
}

// SendRequeues puts the messages back at the end of the queue, counted,
// once delay has passed.
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

// SendDrops removes best-effort messages, counted in QueueStats.Dropped.
func (s *subscription) SendDrops(_ context.Context, hs []any) error {
	return s.settle(hs, func(*delivery) { s.q.dropped++ })
}

// settle applies fn to each delivery of hs and frees it.
func (s *subscription) settle(hs []any, fn func(*delivery)) error {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	if s.stopped {
		return ports.ErrClosed
	}
	for _, h := range hs { // the portable layer settles each once: guard the broker's state anyway
		if x := h.(*delivery); x.heldSlot >= len(s.held) || s.held[x.heldSlot] != x {
			return fmt.Errorf("%w: a delivery settled twice or on another subscription", ports.ErrInvalid)
		}
	}
	for _, h := range hs {
		x := h.(*delivery)
		s.unholdLocked(x)
		fn(x)
		x.it = item{}
		s.free = append(s.free, x)
	}
	return nil
}

// SendDeadLetters publishes kit's dead-letter copies, then acks.
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
		m := &x.it.msg // its identity is in its headers: mem assigns none
		d := ports.Delivery{Message: ports.Message{Topic: s.topic, Key: m.key, Payload: m.payload, Headers: m.headers}, RedeliveryCount: x.it.redeliveries}
		c := kit.DeadLetterCopy(&d, disp, b.clock.Now())
		b.route(s.q.key.ns, &message{topic: s.c.physical(c.Topic), key: c.Key, payload: c.Payload, headers: c.Headers})
	}
	return s.SendAcks(context.Background(), hs)
}
