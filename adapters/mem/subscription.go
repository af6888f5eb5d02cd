package mem

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// subscription is one consumer of a queue; it implements
// driver.Subscription (the portable layer bounds what it asks for by
// SubscriptionSpec.InFlight). Fields below inFlight are guarded by q.mu.
type subscription struct {
	c          *conn
	q          *queue
	topic      ports.Topic       // the logical topic, carried by its deliveries
	bestEffort bool              // SubscriptionSpec.QoS BestEffort: requeue and dead letter drop
	facts      map[string]string // shared by its deliveries, read-only
	wake       chan struct{}     // buffered 1: a push
	done       chan struct{}     // closed by Close

	recs       []driver.Record // ReceiveBatch's result, reused (one caller at a time)
	inFlight   int
	head, tail *delivery // unsettled deliveries in delivery order
	queued     bool      // registered in q.waiters
	receiving  bool      // in ReceiveBatch: counted in q.receivers
	stopped    bool
}

var (
	_ driver.Subscription = (*subscription)(nil)
	_ driver.Requeuer     = (*subscription)(nil)
	_ driver.DeadLetterer = (*subscription)(nil)
	_ driver.Dropper      = (*subscription)(nil)
)

// deliveryState is where a handed-out delivery stands.
type deliveryState uint8

const (
	inFlight deliveryState = iota // held by the caller, unsettled
	settled                       // acked, requeued, dead-lettered or returned by Close
)

// delivery is the broker's side of a handed-out record, its driver
// handle. Deliveries of one ReceiveBatch call are allocated together.
type delivery struct {
	sub        *subscription
	it         item
	prev, next *delivery
	state      deliveryState
}

func newSubscription(c *conn, q *queue, spec ports.SubscriptionSpec) *subscription {
	facts := map[string]string{"queue": q.key.String(), "mode": spec.Mode.String()}
	if spec.Mode == ports.Broadcast {
		facts["instance"] = spec.Instance
	}
	return &subscription{
		c:          c,
		q:          q,
		topic:      spec.Topic,
		bestEffort: spec.QoS == ports.BestEffort,
		facts:      facts,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
}

// signal wakes a Receive blocked on s without blocking.
func (s *subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// ReceiveBatch blocks until the queue has a ready message (and, in a
// single-active group, this subscription is the active one: the first to
// receive, until it stops), then returns up to max ready messages in
// queue order, dropping those past their topic's retention (FIFO;
// requeued messages rejoin at the end when their delay has passed). Each
// record's Headers, Payload and Facts are shared with other deliveries of
// the same message or subscription and must be treated as read-only.
//
// It returns ctx.Err() when ctx is done and ports.ErrClosed after Close.
// The in-process broker has no connection to lose, so there are no other
// errors.
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
			q.active = s // the first to receive is the single active consumer
		}
		eligible := !q.single || q.active == s
		s.countLocked(eligible)
		now := s.c.b.clock.Now()
		q.dropExpiredLocked(now)
		if ready := q.ready.Len(); ready > 0 && eligible {
			// Competing consumers that are also waiting to receive get a
			// fair share of what is ready, not whatever the first one to
			// wake could hold.
			n := min(max, (ready+q.receivers-1)/q.receivers)
			if out := s.takeLocked(n, now); len(out) > 0 {
				s.countLocked(false)
				q.mu.Unlock()
				return out, nil
			}
			continue // every one it took had expired
		}
		q.waitLocked(s) // woken by a push
		q.mu.Unlock()

		select {
		case <-s.wake:
		case <-s.done: // the loop returns ErrClosed
		case <-ctx.Done():
			q.mu.Lock()
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

// takeLocked pops up to n ready items and hands them out as records, in
// one allocation (the records' slice is reused); expired items are dropped
// (so it may hand out fewer, even none).
func (s *subscription) takeLocked(n int, now time.Time) []driver.Record {
	var slab []delivery
	if n == 1 {
		slab = []delivery{{}}
	} else {
		slab = make([]delivery, n)
	}
	if cap(s.recs) < n {
		s.recs = make([]driver.Record, n)
	}
	out := s.recs[:n]
	clear(out)
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
		out[k] = driver.Record{
			Message:         ports.Message{Topic: s.topic, Key: m.key, Payload: m.payload, Headers: m.headers, QoS: m.qos.QoS()},
			RedeliveryCount: it.redeliveries,
			Facts:           s.facts,
			ReceivedAt:      now,
			Handle:          x,
		}
		s.linkLocked(x)
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

// Close stops the subscription: a blocked ReceiveBatch returns
// ports.ErrClosed, and every unsettled delivery goes back to the front of
// the queue in the order it was delivered, with its redelivery count
// incremented (it was delivered once more, as RabbitMQ marks it
// redelivered); in a single-active group the next consumer to receive
// becomes the active one and gets them. Close acks nothing (a best-effort
// subscription's deliveries are returned too: the broker keeps what was
// not settled). For a Broadcast queue whose last consumer this was, the
// queue is deleted (InstanceTTL 0) or kept for InstanceTTL and then
// deleted unless a consumer rejoined it.
//
// The portable layer calls it once, after the last ReceiveBatch and
// settlement returned; it never blocks and always returns nil.
func (s *subscription) Close(context.Context) error {
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
	s.c.b.leave(q)
	return nil
}
