package mem

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// Broker is an in-process message broker, safe for concurrent use. The
// adapters made on one Broker share its topics and queues, as processes
// share a real broker. Make one with [NewBroker], or use [Default].
type Broker struct {
	clock       Clock
	sched       *schedule.Scheduler
	delayedMsgs atomic.Int64 // sent with a Delay and not due yet

	historyMsgs, historyBytes int // WithHistory

	mu       sync.RWMutex
	topics   map[topicKey]*topic
	queues   map[queueKey]*queue
	adapters map[*Adapter]struct{}
	closed   atomic.Bool // written under mu

	failSends, failDeadLetters atomic.Bool
}

// topicKey names a topic within a namespace.
type topicKey struct {
	ns    string
	topic ports.Topic
}

// topic is the queues bound to a topic (replaced under Broker.mu), its
// declared spec and its history. A publish offers under mu, which orders
// it against a new binding: a group starting at the earliest message
// finds each message once, in the history or offered.
type topic struct {
	key    topicKey
	queues atomic.Pointer[[]*queue]
	spec   ports.TopicSpec // declared (Topic "" when not); written under Broker.mu and mu

	mu        sync.Mutex // lock order: Broker.mu, then mu, then queue.mu
	history   ring[message]
	histBytes int
}

// recordLocked keeps m in the history, dropping the oldest beyond the
// bounds or past their retention.
func (t *topic) recordLocked(b *Broker, m *message) {
	t.history.PushBack(*m)
	t.histBytes += len(m.payload)
	for n := t.history.Len(); n > 0; n-- {
		old := t.history.At(0)
		if n <= b.historyMsgs && t.histBytes <= b.historyBytes && (old.expires == 0 || !old.expired(b.clock.Now())) {
			return
		}
		t.histBytes -= len(old.payload)
		t.history.PopFront()
	}
}

// NewBroker returns an empty broker (ports.ErrInvalid for a bad option).
func NewBroker(opts ...BrokerOption) (*Broker, error) {
	cfg := brokerConfig{clock: schedule.SystemClock{}, historyMsgs: DefaultHistoryMessages, historyBytes: DefaultHistoryBytes}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	return &Broker{
		clock:        cfg.clock,
		sched:        schedule.New(schedule.Options{Clock: cfg.clock}),
		historyMsgs:  cfg.historyMsgs,
		historyBytes: cfg.historyBytes,
		topics:       map[topicKey]*topic{},
		queues:       map[queueKey]*queue{},
		adapters:     map[*Adapter]struct{}{},
	}, nil
}

var defaultBroker = sync.OnceValue(func() *Broker {
	b, _ := NewBroker() // no options: cannot fail
	return b
})

// Default returns the process-wide broker of [Open], made on first use.
func Default() *Broker { return defaultBroker() }

// FailSends makes later publishes fail with ports.ErrUnconfirmed, storing
// nothing, or succeed again (tck.SendFaults).
func (b *Broker) FailSends(fail bool) { b.failSends.Store(fail) }

// FailDeadLetters makes later dead-letter publishes fail with
// ports.ErrUnconfirmed, settling nothing, or succeed (tck.DeadLetterFaults).
func (b *Broker) FailDeadLetters(fail bool) { b.failDeadLetters.Store(fail) }

// Close closes the broker's adapters (acking nothing) and drops every
// message it holds. It is idempotent.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	closed := b.closed.Swap(true)
	adapters := slices.Collect(maps.Keys(b.adapters))
	b.mu.Unlock()
	if closed {
		return nil
	}
	for _, a := range adapters {
		_ = a.Close(ctx) // never fails
	}
	b.sched.Stop()
	b.delayedMsgs.Store(0)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, q := range b.queues {
		q.mu.Lock()
		q.clearLocked()
		q.mu.Unlock()
	}
	b.queues, b.topics = map[queueKey]*queue{}, map[topicKey]*topic{}
	return nil
}

// lookup returns the topic (ns, name) or nil, and its declared spec.
func (b *Broker) lookup(ns string, name ports.Topic) (*topic, ports.TopicSpec) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if t := b.topics[topicKey{ns, name}]; t != nil {
		return t, t.spec
	}
	return nil, ports.TopicSpec{}
}

// publish offers m to t's queues and records it; false: no queue.
func (b *Broker) publish(t *topic, m *message) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	qs := *t.queues.Load()
	if len(qs) == 0 {
		return false
	}
	t.recordLocked(b, m)
	for _, q := range qs {
		q.mu.Lock()
		q.offerLocked(m, t.spec.MaxLength)
		q.mu.Unlock()
	}
	return true
}

// send publishes m once t's queues have room (a best-effort message is
// dropped by a full queue instead), or once delay has passed.
func (b *Broker) send(ctx context.Context, t *topic, m *message, delay time.Duration) error {
	if t == nil || len(*t.queues.Load()) == 0 {
		return ports.ErrNoSubscriber
	}
	if delay > 0 {
		held := *m // routed to the queues bound when it is due
		b.delayedMsgs.Add(1)
		if _, err := b.sched.At(b.clock.Now().Add(delay), func() { b.delayedMsgs.Add(-1); b.route(t.key.ns, &held) }); err != nil {
			b.delayedMsgs.Add(-1)
			return ports.ErrClosed
		}
		return nil
	}
	if m.qos != ports.BestEffort {
		for _, q := range *t.queues.Load() {
			if err := q.admit(ctx); err != nil {
				return err
			}
		}
	}
	if b.closed.Load() {
		return ports.ErrClosed
	}
	if !b.publish(t, m) {
		return ports.ErrNoSubscriber
	}
	return nil
}

// route publishes m to the queues bound now, if any.
func (b *Broker) route(ns string, m *message) {
	if t, _ := b.lookup(ns, m.topic); t != nil {
		b.publish(t, m)
	}
}

// declare runs fn under b.mu, unless ctx is done or c or b is closed.
func (b *Broker) declare(ctx context.Context, c *conn, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.closed.Load() || b.closed.Load() {
		return ports.ErrClosed
	}
	return fn()
}

// joinLocked counts a consumer on the queue key, creating it unless
// adopted; a new queue for StartEarliest starts with the topic's history.
func (b *Broker) joinLocked(key queueKey, spec ports.SubscriptionSpec, maxQueue int, adopted bool) (*queue, error) {
	if adopted && b.queues[key] == nil {
		return nil, missingQueue(spec.Topic, spec.Group, key)
	}
	t := b.topicLocked(topicKey{key.ns, key.topic})
	t.mu.Lock()
	q, created := b.queueLocked(key)
	if created && spec.Start == ports.StartEarliest {
		q.filter = spec.KeyFilter // the replay honours the new queue's filter
		now := b.clock.Now()
		q.mu.Lock()
		for i := range t.history.Len() {
			if m := t.history.At(i); !m.expired(now) {
				q.offerLocked(m, t.spec.MaxLength)
			}
		}
		q.mu.Unlock()
	}
	t.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case key.mode == ports.Broadcast && q.consumers > 0:
		return nil, &ports.InstanceSharedError{Instance: key.instance, Where: "a running consumer on " + key.String()}
	case q.consumers > 0 && q.filter != spec.KeyFilter:
		return nil, valueError("SubscriptionSpec.KeyFilter", fmt.Sprintf(
			"is %q but the running consumers of queue %s filter by %q (the filter belongs to the queue: stop them first)",
			spec.KeyFilter, key, q.filter))
	case q.consumers > 0 && q.single != spec.SingleActive:
		return nil, valueError("SubscriptionSpec.SingleActive", fmt.Sprintf(
			"is %v but the running consumers of queue %s have %v (single-active belongs to the group's queue: stop them first)",
			spec.SingleActive, key, q.single))
	}
	q.filter, q.single, q.max, q.ttl = spec.KeyFilter, spec.SingleActive, maxQueue, spec.InstanceTTL
	q.roomLocked() // a raised bound lets blocked senders in
	q.consumers++
	q.gen++
	return q, nil
}

// leave counts a consumer less on q and deletes, or arms the expiry of,
// an idle Broadcast queue.
func (b *Broker) leave(q *queue) {
	q.mu.Lock()
	q.consumers--
	idle := q.consumers == 0 && q.key.mode == ports.Broadcast
	gen, ttl := q.gen, q.ttl
	q.mu.Unlock()
	switch {
	case !idle:
	case ttl <= 0:
		b.deleteQueue(q, gen)
	default:
		if _, err := b.sched.At(b.clock.Now().Add(ttl), func() { b.deleteQueue(q, gen) }); err != nil {
			b.deleteQueue(q, gen) // scheduler closed: the broker is closing
		}
	}
}

// deleteQueue unbinds q unless a consumer joined since gen; the last
// queue of a topic takes its history with it.
func (b *Broker) deleteQueue(q *queue, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q.mu.Lock()
	stale := q.deleted || q.consumers > 0 || q.gen != gen
	if !stale {
		q.clearLocked()
	}
	q.mu.Unlock()
	if stale {
		return
	}
	if b.queues[q.key] == q {
		delete(b.queues, q.key)
	}
	tk := topicKey{q.key.ns, q.key.topic}
	t := b.topics[tk] // a live queue's topic exists
	qs := slices.DeleteFunc(slices.Clone(*t.queues.Load()), func(o *queue) bool { return o == q })
	t.queues.Store(&qs)
	switch {
	case len(qs) > 0:
	case t.spec.Topic == "":
		delete(b.topics, tk)
	default:
		t.mu.Lock()
		t.history, t.histBytes = ring[message]{}, 0
		t.mu.Unlock()
	}
}

// topicLocked returns the topic tk, creating it. b.mu is held.
func (b *Broker) topicLocked(tk topicKey) *topic {
	t := b.topics[tk]
	if t == nil {
		t = &topic{key: tk}
		t.queues.Store(&[]*queue{})
		b.topics[tk] = t
	}
	return t
}

// queueLocked returns the queue key, creating and binding it. b.mu is
// held (and the topic's mu to replay its history).
func (b *Broker) queueLocked(key queueKey) (q *queue, created bool) {
	if q := b.queues[key]; q != nil {
		return q, false
	}
	q = &queue{key: key}
	b.queues[key] = q
	t := b.topicLocked(topicKey{key.ns, key.topic})
	qs := append(slices.Clip(*t.queues.Load()), q) // a new array: readers keep theirs
	t.queues.Store(&qs)
	return q, true
}
