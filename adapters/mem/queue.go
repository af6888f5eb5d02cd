package mem

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// message is one published message, stored by value in each queue it
// enters; its headers and payload are shared, never modified, by every
// copy and delivery of it.
type message struct {
	topic   ports.Topic
	key     string
	payload []byte
	headers ports.Headers
	expires int64 // Unix nanoseconds when the topic's retention drops it (0: never)
	qos     ports.QoS
}

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

// String is the queue's name in Delivery.Facts and errors.
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
// (competing consumers). Its mutex also guards their in-flight lists, so
// one lock covers a receive or a settlement.
type queue struct {
	key queueKey

	mu        sync.Mutex
	filter    string        // KeyFilter: only matching messages enter
	ttl       time.Duration // Broadcast: kept this long after the last consumer left
	ready     ring[item]
	pushed    chan struct{}   // closed on a push when a receiver waits for one
	receivers int             // subscriptions in ReceiveBatch that may take messages
	consumers int
	inFlight  int    // deliveries held by all consumers
	delayed   int    // requeued items waiting in the scheduler
	gen       uint64 // bumped when a consumer joins; stale expiries check it
	deleted   bool
	max       int           // WithMaxQueue: Send waits while ready >= max (0: unbounded)
	room      chan struct{} // closed when senders wait and room is made
	single    bool          // SingleActive: one consumer receives at a time
	active    *subscription // the receiving consumer of a single-active queue
	dropped   int           // dropped unconsumed: retention, MaxLength, best effort
}

// admit waits until q has room for one more ready message, or is deleted.
// On ctx done it returns an error wrapping ErrQueueFull and ctx.Err().
func (q *queue) admit(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.max > 0 && q.ready.Len() >= q.max && !q.deleted {
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
			q.mu.Lock()
		case <-ctx.Done():
			q.mu.Lock()
			return fmt.Errorf("%w: queue %s holds %d ready messages (max_queue %d) and no consumer made room before the send's deadline; consume faster, raise mem.WithMaxQueue (0: unbounded) or give Send a longer deadline: %w",
				ErrQueueFull, q.key, q.ready.Len(), q.max, ctx.Err())
		}
	}
	return nil
}

// roomLocked wakes the senders waiting in admit, if any.
func (q *queue) roomLocked() {
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
}

// offerLocked routes a published message into the queue if its key passes
// the filter; a deleted queue drops it. At maxLen (the topic's MaxLength,
// 0: none) the oldest ready message makes room; a best-effort message that
// finds the queue at its bound is dropped itself.
func (q *queue) offerLocked(m *message, maxLen int) {
	if q.deleted || (q.filter != "" && !matchKey(q.filter, m.key)) {
		return
	}
	if m.qos == ports.BestEffort && q.max > 0 && q.ready.Len() >= q.max {
		q.dropped++
		return
	}
	for maxLen > 0 && q.ready.Len() >= maxLen {
		q.ready.PopFront()
		q.dropped++
	}
	q.ready.PushBack(item{msg: *m})
	q.wakeLocked()
}

// wakeLocked wakes every subscription blocked in ReceiveBatch (the few
// competing consumers of the queue; each re-checks under the lock).
func (q *queue) wakeLocked() {
	if q.pushed != nil {
		close(q.pushed)
		q.pushed = nil
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

// clearLocked deletes the queue's content and lets blocked senders go.
func (q *queue) clearLocked() {
	q.deleted = true
	q.ready = ring[item]{}
	q.roomLocked()
}

// matchKey reports whether key passes a path.Match filter (validated by
// SubscriptionSpec.Validate).
func matchKey(pattern, key string) bool {
	ok, _ := path.Match(pattern, key)
	return ok
}

// ring is a growable FIFO ring buffer (a queue's ready items, a topic's
// history); the zero value is empty. Its capacity is a power of two. It
// shrinks only above keepSlots: a bounded queue keeps its buffer between
// bursts rather than reallocate it on every refill.
type ring[T any] struct {
	buf     []T
	head, n int
}

const keepSlots = 1 << 14

func (r *ring[T]) Len() int { return r.n }

// At returns the i-th element (0 is the front); i must be below Len.
func (r *ring[T]) At(i int) *T { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring[T]) PushBack(v T) {
	if r.n == len(r.buf) {
		r.resize(max(2*len(r.buf), 16))
	}
	*r.At(r.n) = v
	r.n++
}

func (r *ring[T]) PushFront(v T) {
	if r.n == len(r.buf) {
		r.resize(max(2*len(r.buf), 16))
	}
	r.head = (r.head - 1) & (len(r.buf) - 1)
	r.buf[r.head] = v
	r.n++
}

// PopFront removes and returns the first element; ok is false when empty.
func (r *ring[T]) PopFront() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	var zero T
	v, r.buf[r.head] = r.buf[r.head], zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if len(r.buf) > keepSlots && r.n < len(r.buf)/4 {
		r.resize(len(r.buf) / 2) // a drained burst gives its memory back
	}
	return v, true
}

// resize moves the elements, in order, to a new buffer of size slots.
func (r *ring[T]) resize(size int) {
	buf := make([]T, size)
	k := copy(buf, r.buf[r.head:min(r.head+r.n, len(r.buf))])
	copy(buf[k:r.n], r.buf)
	r.buf, r.head = buf, 0
}
