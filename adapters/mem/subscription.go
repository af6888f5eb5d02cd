package mem

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// subscription is one consumer of a queue; it implements
// ports.Subscription. Fields below mu are guarded by q.mu.
type subscription struct {
	a          *Adapter
	q          *queue
	topic      ports.Topic       // the logical topic, carried by its deliveries
	bestEffort bool              // SubscriptionSpec.QoS BestEffort: requeue and dead letter drop
	limit      int               // SubscriptionSpec.InFlight after defaults
	facts      map[string]string // shared by its deliveries, read-only
	wake       chan struct{}     // buffered 1: a push or a freed slot
	done       chan struct{}     // closed by Stop
	errs       chan error        // never written: closed by Stop

	inFlight   int
	head, tail *delivery // unsettled deliveries in delivery order
	queued     bool      // registered in q.waiters
	receiving  bool      // in Receive with room: counted in q.receivers
	waiting    bool      // blocked in Receive
	stopped    bool
}

// deliveryState is where a handed-out delivery stands.
type deliveryState uint8

const (
	inFlight deliveryState = iota // held by the caller, unsettled
	settling                      // a dead-letter publish is under way
	settled                       // acked, requeued, dead-lettered or returned by Stop
)

// delivery is the adapter's side of a handed-out ports.Delivery; the
// Delivery's Handle points back to it. Deliveries of one Receive call are
// allocated together.
type delivery struct {
	pd         ports.Delivery
	sub        *subscription
	it         item
	prev, next *delivery
	state      deliveryState
}

func newSubscription(a *Adapter, q *queue, spec ports.SubscriptionSpec) *subscription {
	facts := map[string]string{"queue": q.key.String(), "mode": spec.Mode.String()}
	if spec.Mode == ports.Broadcast {
		facts["instance"] = spec.Instance
	}
	return &subscription{
		a:          a,
		q:          q,
		topic:      spec.Topic,
		bestEffort: spec.QoS == ports.BestEffort,
		limit:      spec.InFlight,
		facts:      facts,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		errs:       make(chan error),
	}
}

// signal wakes a Receive blocked on s without blocking.
func (s *subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Receive blocks until the queue has a ready message and fewer than
// InFlight deliveries of this subscription are unsettled (and, in a
// single-active group, this subscription is the active one: the first to
// receive, until it stops), then returns up to max ready messages in
// queue order, dropping those past their topic's retention (FIFO; requeued messages rejoin at
// the end when their delay has passed). Each delivery's Headers, Payload
// and Facts are shared with other deliveries of the same message or
// subscription and must be treated as read-only.
//
// It returns ctx.Err() when ctx is done, ports.ErrClosed after Stop (also
// waking a blocked call) and an error wrapping ports.ErrInvalid for max <
// 1. The in-process broker has no connection to lose, so there are no
// other errors.
func (s *subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	if max < 1 {
		return nil, valueError("Receive max", "must be at least 1")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	q := s.q
	q.mu.Lock()
	for {
		s.waiting = false
		if s.stopped {
			s.countLocked(false)
			q.mu.Unlock()
			return nil, ports.ErrClosed
		}
		room := s.limit - s.inFlight
		if q.single && q.active == nil {
			q.active = s // the first to receive is the single active consumer
		}
		eligible := !q.single || q.active == s
		s.countLocked(room > 0 && eligible)
		now := s.a.b.clock.Now()
		q.dropExpiredLocked(now)
		if ready := q.ready.Len(); room > 0 && ready > 0 && eligible {
			// Competing consumers that are also waiting to receive get a
			// fair share of what is ready, not whatever the first one to
			// wake could hold.
			n := min(max, room, (ready+q.receivers-1)/q.receivers)
			if out := s.takeLocked(n, now); len(out) > 0 {
				s.countLocked(false)
				q.mu.Unlock()
				return out, nil
			}
			continue // every one it took had expired
		}
		if room > 0 {
			q.waitLocked(s) // woken by a push
		}
		s.waiting = true // woken by a settlement freeing a slot
		q.mu.Unlock()

		select {
		case <-s.wake:
		case <-s.done: // the loop returns ErrClosed
		case <-ctx.Done():
			q.mu.Lock()
			s.waiting = false
			q.unwaitLocked(s)
			s.countLocked(false)
			q.mu.Unlock()
			return nil, ctx.Err()
		}
		q.mu.Lock()
	}
}

// countLocked records whether s is in Receive with room for more, which
// is what q.receivers counts.
func (s *subscription) countLocked(receiving bool) {
	if s.receiving == receiving {
		return
	}
	s.receiving = receiving
	if receiving {
		s.q.receivers++
	} else {
		s.q.receivers--
	}
}

// single is one delivery and the slice that returns it, allocated
// together: a consumer that keeps up receives one message at a time.
type single struct {
	x   [1]delivery
	out [1]*ports.Delivery
}

// takeLocked pops up to n ready items and hands them out as deliveries, in
// one allocation for n == 1 and two otherwise; expired items are dropped
// (so it may hand out fewer, even none).
func (s *subscription) takeLocked(n int, now time.Time) []*ports.Delivery {
	var slab []delivery
	var out []*ports.Delivery
	if n == 1 {
		one := new(single)
		slab, out = one.x[:], one.out[:]
	} else {
		slab, out = make([]delivery, n), make([]*ports.Delivery, n)
	}
	k := 0
	for k < n {
		it, ok := s.q.ready.PopFront()
		if !ok {
			break
		}
		if it.msg.expired(now) {
			s.q.dropped++
			continue
		}
		x := &slab[k]
		m := &it.msg
		x.sub, x.it = s, it
		x.pd = ports.Delivery{
			Message:         ports.Message{Topic: s.topic, Key: m.key, Payload: m.payload, Headers: m.headers, QoS: m.qos.QoS()},
			ID:              m.id,
			RedeliveryCount: it.redeliveries,
			Facts:           s.facts,
			ReceivedAt:      now,
			Handle:          x,
		}
		if m.id != "" {
			x.pd.IDSource = ports.IDProducer // a foreign message without ce-id has no identity
		}
		s.linkLocked(x)
		out[k] = &x.pd
		k++
	}
	s.inFlight += k
	s.q.inFlight += k
	s.q.roomLocked()
	return out[:k]
}

// linkLocked appends x to the unsettled list.
func (s *subscription) linkLocked(x *delivery) {
	x.prev, x.next = s.tail, nil
	if s.tail != nil {
		s.tail.next = x
	} else {
		s.head = x
	}
	s.tail = x
}

// unlinkLocked removes x from the unsettled list and frees its slot.
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
	s.inFlight--
	s.q.inFlight--
}

// Stop stops the subscription: a blocked Receive returns ports.ErrClosed,
// and every unsettled delivery goes back to the front of the queue in the
// order it was delivered, with its redelivery count incremented (it was
// delivered once more, as RabbitMQ marks it redelivered); in a
// single-active group the next consumer to receive becomes the active one
// and gets them. Stop acks nothing (a best-effort subscription's
// deliveries are returned too: the broker keeps what was not settled). A delivery whose dead-letter publish is under way is left to
// that Settle call, which removes it on success and returns it to the
// queue on failure. Errors is closed. For a Broadcast queue whose last
// consumer this was, the queue is deleted (InstanceTTL 0) or kept for
// InstanceTTL and then deleted unless a consumer rejoined it.
//
// Stop is idempotent, never blocks and always returns nil.
func (s *subscription) Stop(ctx context.Context) error {
	q := s.q
	q.mu.Lock()
	if s.stopped {
		q.mu.Unlock()
		return nil
	}
	s.stopped = true
	close(s.done)
	returned := 0
	for x := s.tail; x != nil; {
		prev := x.prev
		if x.state == inFlight {
			s.unlinkLocked(x)
			x.state = settled
			it := x.it
			it.redeliveries++
			q.ready.PushFront(it)
			returned++
		}
		x = prev
	}
	q.unwaitLocked(s)
	if q.active == s {
		q.active = nil // a standing-by consumer takes over
		returned++
	}
	if returned > 0 {
		q.wakeLocked()
	}
	q.mu.Unlock()

	close(s.errs)
	s.a.forget(s)
	s.a.b.leave(q)
	return nil
}

// Errors returns a channel that is closed by Stop. The in-process broker
// has no connection to lose, so nothing is ever sent on it.
func (s *subscription) Errors() <-chan error { return s.errs }
