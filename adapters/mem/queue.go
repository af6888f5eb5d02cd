package mem

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// message is one published message. It is stored by value in each queue
// it enters (no allocation per message beyond its headers and payload),
// and its headers and payload are shared, never modified, by every copy
// and every delivery of it.
type message struct {
	topic   ports.Topic
	key     string
	id      string
	payload []byte
	headers ports.Headers
	// expires is when the topic's retention drops it unconsumed, in Unix
	// nanoseconds (0: kept until consumed). Kept small: a message is
	// stored by value in every queue and delivery.
	expires int64
	// qos is the message's class: a best-effort message is dropped by a
	// full queue instead of making Send wait.
	qos qosClass
}

// qosClass is a ports.QoS in one byte (only the two classes Send accepts).
type qosClass uint8

func classOf(q ports.QoS) qosClass {
	if q == ports.BestEffort {
		return bestEffortClass
	}
	return 0
}

const bestEffortClass qosClass = 1

// QoS returns the class as a ports.QoS.
func (c qosClass) QoS() ports.QoS {
	if c == bestEffortClass {
		return ports.BestEffort
	}
	return ports.AtLeastOnce
}

// expired reports whether m's retention has passed at now.
func (m *message) expired(now time.Time) bool {
	return m.expires != 0 && now.UnixNano() >= m.expires
}

// item is a message's place in one queue.
type item struct {
	msg          message
	redeliveries int
}

// queueKey names a queue: one per (topic, group) for LoadBalance, one per
// (topic, group, instance) for Broadcast, within a namespace.
type queueKey struct {
	ns       string
	topic    ports.Topic
	mode     ports.Mode
	group    string
	instance string
}

// String is the queue's name in Delivery.Facts and Stats.
func (k queueKey) String() string {
	name := string(k.topic) + "/" + k.group
	if k.mode == ports.Broadcast {
		name += "/" + k.instance
	}
	if k.ns != "" {
		name = k.ns + ":" + name
	}
	return name
}

// queue is a FIFO of ready items shared by the subscriptions consuming it
// (competing consumers). Its mutex also guards the in-flight bookkeeping of
// those subscriptions, so one lock covers a receive or a settlement.
type queue struct {
	key queueKey

	mu        sync.Mutex
	filter    string        // KeyFilter: only matching messages enter
	ttl       time.Duration // Broadcast: kept this long after the last consumer left
	ready     ring[item]
	waiters   []*subscription // blocked in Receive, woken on push
	receivers int             // subscriptions in Receive with room for more
	consumers int
	inFlight  int    // deliveries held by all consumers
	delayed   int    // requeued items waiting in the scheduler
	gen       uint64 // bumped when a consumer joins; stale expiries check it
	deleted   bool
	max       int           // WithMaxQueue: Send waits while ready >= max (0: unbounded)
	room      chan struct{} // closed and replaced when senders wait and room is made
	senders   bool          // a Send waits on room
	maxLen    int           // TopicSpec.MaxLength: the oldest ready message is dropped beyond it
	single    bool          // SubscriptionSpec.SingleActive: one consumer receives at a time
	active    *subscription // the receiving consumer of a single-active queue
	dropped   int           // messages dropped: retention, MaxLength, best effort
}

// admit waits until q has room for one more ready message, or is deleted
// (a deleted queue drops what it is offered). On ctx done it returns an
// error wrapping ErrQueueFull and ctx.Err().
func (q *queue) admit(ctx context.Context) error {
	q.mu.Lock()
	for q.max > 0 && q.ready.Len() >= q.max && !q.deleted {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.senders = true
		q.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			q.mu.Lock()
			n, limit := q.ready.Len(), q.max
			q.mu.Unlock()
			return fmt.Errorf("%w: queue %s holds %d ready messages (max_queue %d) and no consumer made room before the send's deadline; consume faster, raise mem.WithMaxQueue (0: unbounded) or give Send a longer deadline: %w",
				ErrQueueFull, q.key, n, limit, ctx.Err())
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
	return nil
}

// roomLocked wakes the senders waiting in admit, if any.
func (q *queue) roomLocked() {
	if q.senders {
		q.senders = false
		close(q.room)
		q.room = nil
	}
}

// offer routes a published message into the queue if its key passes the
// queue's filter. A deleted queue drops it. At the topic's MaxLength the
// oldest ready message is dropped to make room; a best-effort message
// that finds the queue at its WithMaxQueue bound is dropped itself.
func (q *queue) offer(m *message) {
	q.mu.Lock()
	q.offerLocked(m)
	q.mu.Unlock()
}

func (q *queue) offerLocked(m *message) {
	if q.deleted || (q.filter != "" && !matchKey(q.filter, m.key)) {
		return
	}
	if m.qos == bestEffortClass && q.max > 0 && q.ready.Len() >= q.max {
		q.dropped++
		return
	}
	if q.maxLen > 0 {
		for q.ready.Len() >= q.maxLen {
			q.ready.PopFront()
			q.dropped++
		}
	}
	q.ready.PushBack(item{msg: *m})
	q.wakeLocked()
}

// dropExpiredLocked drops the expired messages at the front of the queue
// (retention is measured from the publish, so the oldest come first).
func (q *queue) dropExpiredLocked(now time.Time) {
	for q.ready.Len() > 0 {
		it, _ := q.ready.Front()
		if !it.msg.expired(now) {
			return
		}
		q.ready.PopFront()
		q.dropped++
	}
}

// requeued puts an item back at the end of the queue after its delay.
func (q *queue) requeued(it item) {
	q.mu.Lock()
	q.delayed--
	if !q.deleted {
		q.ready.PushBack(it)
		q.wakeLocked()
	}
	q.mu.Unlock()
}

// wakeLocked wakes every subscription blocked in Receive. There are few
// (the competing consumers of one queue); each re-checks under the lock.
func (q *queue) wakeLocked() {
	for i, s := range q.waiters {
		s.queued = false
		s.signal()
		q.waiters[i] = nil
	}
	q.waiters = q.waiters[:0]
}

// waitLocked registers s to be woken by the next push.
func (q *queue) waitLocked(s *subscription) {
	if !s.queued {
		s.queued = true
		q.waiters = append(q.waiters, s)
	}
}

// unwaitLocked removes s from the waiters.
func (q *queue) unwaitLocked(s *subscription) {
	if !s.queued {
		return
	}
	s.queued = false
	for i, w := range q.waiters {
		if w == s {
			last := len(q.waiters) - 1
			q.waiters[i] = q.waiters[last]
			q.waiters[last] = nil
			q.waiters = q.waiters[:last]
			return
		}
	}
}

// matchKey reports whether key passes a path.Match filter. The pattern
// was validated by SubscriptionSpec.Validate.
func matchKey(pattern, key string) bool {
	ok, _ := path.Match(pattern, key)
	return ok
}
