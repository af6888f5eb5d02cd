package mem

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// Broker is an in-process message broker. Every [Adapter] made on the same
// Broker talks to the same topics and queues, so several adapters on one
// Broker behave like several processes on one real broker: they compete
// in a LoadBalance group, each get a copy in Broadcast, and a restarted
// adapter finds its group's backlog.
//
// A Broker is safe for concurrent use. Make one with [NewBroker], or use
// the process-wide [Default].
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

// topic is the set of queues bound to a topic, its declared spec and its
// history. Subscribe and queue deletion replace the set under Broker.mu;
// routing offers under topic.mu, which also orders each publish against a
// new queue binding, so that a group starting at the earliest message
// finds each message exactly once: in the history it copies, or offered.
type topic struct {
	queues atomic.Pointer[[]*queue]
	spec   ports.TopicSpec // declared (Topic "" when not); written under Broker.mu and mu

	mu        sync.Mutex // lock order: Broker.mu, then mu, then queue.mu
	history   ring[message]
	histBytes int
}

// recordLocked keeps m in the topic's history, dropping the oldest
// messages beyond the broker's bounds and those past their retention.
func (t *topic) recordLocked(b *Broker, m *message) {
	t.history.PushBack(*m)
	t.histBytes += len(m.payload)
	var now time.Time // read only for a retention
	for t.history.Len() > 0 {
		old := t.history.At(0)
		if t.history.Len() <= b.historyMsgs && t.histBytes <= b.historyBytes {
			if old.expires == 0 {
				return
			}
			if now.IsZero() {
				now = b.clock.Now()
			}
			if !old.expired(now) {
				return
			}
		}
		t.histBytes -= len(old.payload)
		t.history.PopFront()
	}
}

// NewBroker returns a new, empty broker. An invalid option is returned as
// an error wrapping ports.ErrInvalid.
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

// Default returns the process-wide broker that [Open] uses, created on
// first use; it holds no goroutine while idle. Closing it closes it for
// the rest of the process.
func Default() *Broker { return defaultBroker() }

// FailSends makes every later publish through adapters of this broker go
// unconfirmed (Send fails each message with ports.ErrUnconfirmed and
// stores nothing) or succeed again. A fault hook for tck.SendFaults.
func (b *Broker) FailSends(fail bool) { b.failSends.Store(fail) }

// FailDeadLetters makes every later dead-letter publish fail with
// ports.ErrUnconfirmed, leaving the originals unsettled, or succeed
// again. A fault hook for tck.DeadLetterFaults.
func (b *Broker) FailDeadLetters(fail bool) { b.failDeadLetters.Store(fail) }

// Close closes every adapter of the broker (stopping their subscriptions,
// which acks nothing), drops every queued, in-flight and scheduled message
// and stops the scheduler. It is idempotent and never blocks on I/O;
// afterwards Send and Subscribe return ports.ErrClosed.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		return nil
	}
	b.closed.Store(true)
	adapters := make([]*Adapter, 0, len(b.adapters))
	for a := range b.adapters {
		adapters = append(adapters, a)
	}
	b.mu.Unlock()
	for _, a := range adapters {
		_ = a.Close(ctx) // never fails
	}
	b.sched.Stop()
	b.delayedMsgs.Store(0)
	b.mu.Lock()
	queues := b.queues
	b.queues, b.topics = map[queueKey]*queue{}, map[topicKey]*topic{}
	b.mu.Unlock()
	for _, q := range queues {
		q.mu.Lock()
		q.clearLocked()
		q.mu.Unlock()
	}
	return nil
}

// lookup returns the topic named (ns, name), nil when it has no queue and
// no spec, and its declared spec.
func (b *Broker) lookup(ns string, name ports.Topic) (*topic, ports.TopicSpec) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	spec, t := b.lookupLocked(topicKey{ns, name})
	return t, spec
}

func (b *Broker) lookupLocked(tk topicKey) (ports.TopicSpec, *topic) {
	if t := b.topics[tk]; t != nil {
		return t.spec, t
	}
	return ports.TopicSpec{}, nil
}

// publish offers m to every queue bound to t and records it in the
// topic's history; it reports whether there was a queue.
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

// send publishes m to t's queues once each has room (see WithMaxQueue; a
// best-effort message is dropped by a full queue instead). It fails with
// ports.ErrNoSubscriber when no queue is bound, and on ctx done with an
// error wrapping ErrQueueFull and ctx.Err(), storing nothing.
func (b *Broker) send(ctx context.Context, t *topic, m *message) error {
	if t == nil || len(*t.queues.Load()) == 0 {
		return ports.ErrNoSubscriber
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

// delay routes m in namespace ns once d has passed, to the queues bound
// then. It reports false, holding nothing, after Close.
func (b *Broker) delay(ns string, m message, d time.Duration) bool {
	b.delayedMsgs.Add(1)
	_, err := b.sched.At(b.clock.Now().Add(d), func() {
		b.delayedMsgs.Add(-1)
		b.route(ns, &m)
	})
	if err != nil {
		b.delayedMsgs.Add(-1)
	}
	return err == nil
}

// route publishes m to the queues bound to its topic now (a dead-letter
// copy, a delayed message falling due); a topic without queues drops it.
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

// join returns the queue named key, creating and binding it if needed
// (never when adopted: the queue must exist), and counts one more
// consumer on it. A queue it creates for StartEarliest starts with the
// topic's history.
func (b *Broker) join(key queueKey, spec ports.SubscriptionSpec, maxQueue int, adopted bool) (*queue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return nil, ports.ErrClosed
	}
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
	q.filter, q.single, q.max = spec.KeyFilter, spec.SingleActive, maxQueue
	q.roomLocked() // a raised bound lets blocked senders in
	if key.mode == ports.Broadcast {
		q.ttl = spec.InstanceTTL
	}
	q.consumers++
	q.gen++
	return q, nil
}

// leave counts one consumer less on q and deletes, or arms the expiry of,
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

// deleteQueue unbinds and empties q unless a consumer joined it since
// generation gen. The topic's last queue takes its history with it.
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
	t := b.topics[tk]
	if t == nil {
		return
	}
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
		t = &topic{}
		t.queues.Store(&[]*queue{})
		b.topics[tk] = t
	}
	return t
}

// queueLocked returns the queue named key, creating and binding it to its
// topic when it does not exist. b.mu is held; to bind a queue that
// replays the topic's history, hold the topic's mu too.
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

// register tracks a new adapter; it fails after Close.
func (b *Broker) register(a *Adapter) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ports.ErrClosed
	}
	b.adapters[a] = struct{}{}
	return nil
}

// unregister forgets a closed adapter.
func (b *Broker) unregister(a *Adapter) {
	b.mu.Lock()
	delete(b.adapters, a)
	b.mu.Unlock()
}
