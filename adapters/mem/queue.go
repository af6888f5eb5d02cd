package mem

import (
	"context"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// message is a published message, stored by value in each queue; its
// headers and payload are shared, read-only, by every copy and delivery.
type message struct {
	topic   ports.Topic
	key     string
	payload []byte
	headers ports.Headers
	expires int64 // Unix nanoseconds when its retention ends (0: never)
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

// queueKey names a queue; instance is a Broadcast queue's.
type queueKey struct {
	ns       string
	topic    ports.Topic
	mode     ports.Mode
	group    string
	instance string
}

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

// queue is a FIFO of ready items shared by competing consumers. Its mutex
// also guards their in-flight lists: one lock per receive or settlement.
type queue struct {
	key queueKey

	mu        sync.Mutex
	filter    string        // KeyFilter: only matching messages enter
	ttl       time.Duration // Broadcast: kept after the last consumer left
	ready     ring[item]
	pushed    chan struct{} // closed by a push, when a receiver waits
	receivers int           // in ReceiveBatch and may take messages
	consumers int
	inFlight  int    // deliveries held by all consumers
	delayed   int    // requeued items waiting in the scheduler
	gen       uint64 // bumped by a join: stale expiries check it
	deleted   bool
	max       int           // WithMaxQueue (0: unbounded)
	room      chan struct{} // closed when room is made, when senders wait
	single    bool          // SingleActive: one consumer receives at a time
	active    *subscription // the receiving consumer of a single-active queue
	dropped   int           // dropped unconsumed: retention, MaxLength, best effort
}

// admit waits until q has room for a message, or is deleted.
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

// roomLocked wakes the senders waiting in admit.
func (q *queue) roomLocked() {
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
}

// offerLocked adds m if its key passes the filter. At maxLen (MaxLength)
// the oldest makes room; best effort at the bound is dropped.
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

// wakeLocked wakes the receivers waiting for a push.
func (q *queue) wakeLocked() {
	if q.pushed != nil {
		close(q.pushed)
		q.pushed = nil
	}
}

// requeued puts back an item whose requeue delay passed.
func (q *queue) requeued(it item) {
	q.mu.Lock()
	q.delayed--
	if !q.deleted {
		q.ready.PushBack(it)
		q.wakeLocked()
	}
	q.mu.Unlock()
}

// clearLocked deletes the queue and lets blocked senders go.
func (q *queue) clearLocked() {
	q.deleted = true
	q.ready = ring[item]{}
	q.roomLocked()
}

// matchKey reports whether key passes a (valid) path.Match filter.
func matchKey(pattern, key string) bool {
	ok, _ := path.Match(pattern, key)
	return ok
}

// ring is a FIFO ring buffer of power-of-two capacity. It shrinks only
// above keepSlots: a bounded queue keeps its buffer between bursts
// instead of reallocating it on every refill.
type ring[T any] struct {
	buf     []T
	head, n int
}

const keepSlots = 1 << 14

func (r *ring[T]) Len() int { return r.n }

// At returns the i-th element from the front (i < Len).
func (r *ring[T]) At(i int) *T { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring[T]) PushBack(v T) {
	r.grow()
	*r.At(r.n) = v
	r.n++
}

func (r *ring[T]) PushFront(v T) {
	r.grow()
	r.head = (r.head - 1) & (len(r.buf) - 1)
	r.buf[r.head] = v
	r.n++
}

// PopFront removes and returns the first element (Len > 0).
func (r *ring[T]) PopFront() (v T) {
	var zero T
	v, r.buf[r.head] = r.buf[r.head], zero
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	if len(r.buf) > keepSlots && r.n < len(r.buf)/4 {
		r.resize(len(r.buf) / 2) // a drained burst gives its memory back
	}
	return v
}

func (r *ring[T]) grow() {
	if r.n == len(r.buf) {
		r.resize(max(2*len(r.buf), 16))
	}
}

func (r *ring[T]) resize(size int) {
	buf := make([]T, size)
	k := copy(buf, r.buf[r.head:min(r.head+r.n, len(r.buf))])
	copy(buf[k:r.n], r.buf)
	r.buf, r.head = buf, 0
}
