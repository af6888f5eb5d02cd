package mem

import (
	"context"
	"fmt"
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
// A Broker is safe for concurrent use. Its zero value is not usable: make
// one with [NewBroker], or use the process-wide [Default].
type Broker struct {
	clock Clock
	sched *schedule.Scheduler
	// delayedMsgs counts messages sent with a Delay that are still held
	// by sched (for Stats).
	delayedMsgs atomic.Int64

	// history bounds what each topic keeps for new groups that start
	// at the earliest message (WithHistory).
	historyMsgs, historyBytes int

	mu       sync.RWMutex
	topics   map[topicKey]*topicQueues
	queues   map[queueKey]*queue
	specs    map[topicKey]ports.TopicSpec // declared with DeclareTopic
	adapters map[*Adapter]struct{}
	closed   atomic.Bool // written under mu

	failSends       atomic.Bool
	failDeadLetters atomic.Bool
}

// topicKey names a topic within a namespace.
type topicKey struct {
	ns    string
	topic ports.Topic
}

// topicQueues is the set of queues bound to a topic and the topic's
// history. Subscribe and queue deletion replace the set under Broker.mu;
// routing reads it under mu, which also orders each publish against a
// new queue binding, so that a group starting at the earliest message
// finds each message exactly once: in the history it copies, or offered.
type topicQueues struct {
	queues atomic.Pointer[[]*queue]

	mu        sync.Mutex // lock order: Broker.mu, then mu, then queue.mu
	history   ring[message]
	histBytes int
}

// recordLocked keeps m in the topic's history, dropping the oldest
// messages beyond the broker's bounds and those past their retention.
func (t *topicQueues) recordLocked(b *Broker, m *message, now time.Time) {
	t.history.PushBack(*m)
	t.histBytes += len(m.payload)
	for t.history.Len() > 0 {
		old, _ := t.history.Front()
		if t.history.Len() <= b.historyMsgs && t.histBytes <= b.historyBytes && !old.expired(now) {
			return
		}
		t.history.PopFront()
		t.histBytes -= len(old.payload)
	}
}

// replayLocked copies the topic's retained history into q, a queue that
// was just bound and starts at the earliest message.
func (t *topicQueues) replayLocked(q *queue, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range t.history.Len() {
		m := t.history.At(i)
		if !m.expired(now) {
			q.offerLocked(&m)
		}
	}
}

// NewBroker returns a new, empty broker. Options are validated; an invalid
// one is returned as an error wrapping ports.ErrInvalid.
func NewBroker(opts ...BrokerOption) (*Broker, error) {
	cfg := brokerConfig{clock: systemClock{}, historyMsgs: DefaultHistoryMessages, historyBytes: DefaultHistoryBytes}
	for _, o := range opts {
		if err := o.applyBroker(&cfg); err != nil {
			return nil, err
		}
	}
	b := &Broker{
		clock:        cfg.clock,
		historyMsgs:  cfg.historyMsgs,
		historyBytes: cfg.historyBytes,
		topics:       map[topicKey]*topicQueues{},
		queues:       map[queueKey]*queue{},
		specs:        map[topicKey]ports.TopicSpec{},
		adapters:     map[*Adapter]struct{}{},
	}
	b.sched = schedule.New(schedule.Options{Clock: scheduleClock{cfg.clock}})
	return b, nil
}

var defaultBroker = sync.OnceValue(func() *Broker {
	b, _ := NewBroker() // no options: cannot fail
	return b
})

// Default returns the process-wide broker that [Open] uses. It is created
// on first use and holds no goroutine while idle. Closing it closes it for
// the rest of the process.
func Default() *Broker { return defaultBroker() }

// FailSends makes every later publish through adapters of this broker go
// unconfirmed (true) — Send returns a *ports.SendError wrapping
// ports.ErrUnconfirmed per message and stores nothing — or succeed again
// (false). It is a fault hook for tests (tck.SendFaults).
func (b *Broker) FailSends(fail bool) { b.failSends.Store(fail) }

// FailDeadLetters makes every later dead-letter publish of this broker
// fail (true) — Settle with DeadLetter then returns an error wrapping
// ports.ErrUnconfirmed and leaves the originals unsettled — or succeed
// again (false). It is a fault hook for tests (tck.DeadLetterFaults).
func (b *Broker) FailDeadLetters(fail bool) { b.failDeadLetters.Store(fail) }

// Close closes every adapter of the broker (stopping their subscriptions,
// which acks nothing), drops every queued, in-flight and scheduled message
// and stops the scheduler without running anything it held. It is
// idempotent; afterwards Send and Subscribe on its adapters return
// ports.ErrClosed. Close never blocks on I/O: ctx is accepted for the
// shape of the API.
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
	b.queues = map[queueKey]*queue{}
	b.topics = map[topicKey]*topicQueues{}
	b.mu.Unlock()
	for _, q := range queues {
		q.mu.Lock()
		q.deleted = true
		q.ready.Clear()
		q.roomLocked()
		q.mu.Unlock()
	}
	return nil
}

// route hands a message to every queue bound to its topic and records it
// in the topic's history; it reports whether there was a queue. A topic
// with no queue drops it (Send refuses such a message with
// ports.ErrNoSubscriber before it gets here; a delayed one falls due to
// the queues bound then).
func (b *Broker) route(ns string, m *message) bool {
	b.mu.RLock()
	t := b.topics[topicKey{ns, m.topic}]
	b.mu.RUnlock()
	if t == nil {
		return false
	}
	return b.publish(t, m)
}

// publish offers m to every queue bound to t and records it, under t.mu.
func (b *Broker) publish(t *topicQueues, m *message) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	qs := *t.queues.Load()
	if len(qs) == 0 {
		return false
	}
	t.recordLocked(b, m, b.clock.Now())
	for _, q := range qs {
		q.offer(m)
	}
	return true
}

// spec returns the declared spec of topic in namespace ns (zero when not
// declared).
func (b *Broker) spec(ns string, topic ports.Topic) ports.TopicSpec {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.specs[topicKey{ns, topic}]
}

// send routes a message published by Send: it first waits until every
// queue bound to the topic has room (see WithMaxQueue), then offers it to
// each. On ctx done it stores nothing and returns an error wrapping
// ErrQueueFull and ctx.Err().
func (b *Broker) send(ctx context.Context, ns string, m *message) error {
	b.mu.RLock()
	t := b.topics[topicKey{ns, m.topic}]
	b.mu.RUnlock()
	if t == nil {
		return ports.ErrNoSubscriber
	}
	qs := *t.queues.Load()
	if len(qs) == 0 {
		return ports.ErrNoSubscriber
	}
	if m.qos != bestEffortClass { // a best-effort message is dropped by a full queue instead
		for _, q := range qs {
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

// bound reports whether a queue is bound to topic in namespace ns (a
// subscription or a declared group).
func (b *Broker) bound(ns string, topic ports.Topic) bool {
	b.mu.RLock()
	t := b.topics[topicKey{ns, topic}]
	b.mu.RUnlock()
	return t != nil && len(*t.queues.Load()) > 0
}

// delay routes m in namespace ns once d has passed, holding it in the
// scheduler. It reports false, holding nothing, after Close.
func (b *Broker) delay(ns string, m message, d time.Duration) bool {
	b.delayedMsgs.Add(1)
	_, err := b.sched.At(b.clock.Now().Add(d), func() {
		b.delayedMsgs.Add(-1)
		b.route(ns, &m)
	})
	if err != nil {
		b.delayedMsgs.Add(-1)
		return false
	}
	return true
}

// scheduleClock lets a Clock drive operators/schedule.
type scheduleClock struct{ c Clock }

func (s scheduleClock) Now() time.Time { return s.c.Now() }

func (s scheduleClock) AfterFunc(d time.Duration, f func()) schedule.ClockTimer {
	return s.c.AfterFunc(d, f)
}

// join returns the queue named key, creating and binding it if needed
// (never when adopted: the queue must exist), and counts one more
// consumer on it. A queue it creates for spec.Start StartEarliest starts
// with the topic's history. The caller holds no lock.
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
		t.replayLocked(q, b.clock.Now())
	}
	t.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if key.mode == ports.Broadcast && q.consumers > 0 {
		return nil, &ports.InstanceSharedError{Instance: key.instance, Where: "a running consumer on " + key.String()}
	}
	if q.consumers > 0 && q.filter != spec.KeyFilter {
		return nil, valueError("SubscriptionSpec.KeyFilter", fmt.Sprintf(
			"is %q but the running consumers of queue %s filter by %q (the filter belongs to the queue: stop them first)",
			spec.KeyFilter, key, q.filter))
	}
	if q.consumers > 0 && q.single != spec.SingleActive {
		return nil, valueError("SubscriptionSpec.SingleActive", fmt.Sprintf(
			"is %v but the running consumers of queue %s have %v (single-active belongs to the group's queue: stop them first)",
			spec.SingleActive, key, q.single))
	}
	q.filter = spec.KeyFilter
	q.single = spec.SingleActive
	q.max = maxQueue
	q.roomLocked() // a raised bound lets blocked senders in
	if key.mode == ports.Broadcast {
		q.ttl = spec.InstanceTTL
	}
	q.consumers++
	q.gen++
	return q, nil
}

// leave counts one consumer less on q (called by Stop, without locks) and
// deletes or arms the expiry of an idle Broadcast queue.
func (b *Broker) leave(q *queue) {
	q.mu.Lock()
	q.consumers--
	idle := q.consumers == 0 && q.key.mode == ports.Broadcast
	gen, ttl := q.gen, q.ttl
	q.mu.Unlock()
	if !idle {
		return
	}
	if ttl <= 0 {
		b.deleteQueue(q, gen)
		return
	}
	if _, err := b.sched.At(b.clock.Now().Add(ttl), func() { b.deleteQueue(q, gen) }); err != nil {
		b.deleteQueue(q, gen) // scheduler closed: the broker is closing
	}
}

// deleteQueue unbinds and empties q unless a consumer joined it since
// generation gen.
func (b *Broker) deleteQueue(q *queue, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted || q.consumers > 0 || q.gen != gen {
		return
	}
	q.deleted = true
	q.ready.Clear()
	q.roomLocked()
	if b.queues[q.key] == q {
		delete(b.queues, q.key)
	}
	tk := topicKey{q.key.ns, q.key.topic}
	t := b.topics[tk]
	if t == nil {
		return
	}
	old := *t.queues.Load()
	qs := make([]*queue, 0, len(old))
	for _, o := range old {
		if o != q {
			qs = append(qs, o)
		}
	}
	if len(qs) == 0 {
		delete(b.topics, tk)
		return
	}
	t.queues.Store(&qs)
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
