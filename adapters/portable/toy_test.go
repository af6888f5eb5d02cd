package portable_test

// A complete broker driver, in memory: what a new broker costs on the
// portable layer. It implements the required driver interfaces and three
// optional ones (GroupDeclarer; RequeueCopier: the toy broker copies a
// topic into every group's queue, so a requeue copy goes to the requeuing
// queue only; Abandoner: the toy broker redelivers an unacked message only
// when told); the portable layer supplies the rest (requeue and
// dead-letter copies, the delay fallback, the in-flight
// bound, double-settlement detection, Send's checks).

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// toyBroker is the broker: queues bound to topics.
type toyBroker struct {
	mu        sync.Mutex
	queues    map[toyKey]*toyQueue
	failSends bool
	failDLQ   bool
}

type toyKey struct {
	topic ports.Topic
	queue string // "g:<group>" for a LoadBalance group, "i:<group>:<instance>" for Broadcast
}

type toyQueue struct {
	ready     []toyMsg
	next      uint64
	wake      chan struct{} // closed and replaced on every push
	consumers int
	broadcast bool
}

type toyMsg struct {
	m           ports.Message
	redelivered int
	tag         uint64
}

func newToyBroker() *toyBroker { return &toyBroker{queues: map[toyKey]*toyQueue{}} }

func (b *toyBroker) setFailSends(v bool) { b.mu.Lock(); b.failSends = v; b.mu.Unlock() }
func (b *toyBroker) setFailDLQ(v bool)   { b.mu.Lock(); b.failDLQ = v; b.mu.Unlock() }

// queueLocked returns the queue of k, creating it.
func (b *toyBroker) queueLocked(k toyKey) *toyQueue {
	q := b.queues[k]
	if q == nil {
		q = &toyQueue{wake: make(chan struct{})}
		b.queues[k] = q
	}
	return q
}

// publish stores a copy of m in every queue bound to its topic.
func (b *toyBroker) publish(m ports.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failSends || (b.failDLQ && strings.HasSuffix(string(m.Topic), ports.DeadLetterSuffix)) {
		return ports.ErrUnconfirmed
	}
	m.Headers, m.Payload = m.Headers.Clone(), slices.Clone(m.Payload)
	routed := false
	for k, q := range b.queues {
		if k.topic == m.Topic {
			q.ready = append(q.ready, toyMsg{m: m})
			close(q.wake)
			q.wake = make(chan struct{})
			routed = true
		}
	}
	if !routed {
		return ports.ErrNoSubscriber
	}
	return nil
}

// toyDriver is one connection to a toyBroker; rename maps logical topics
// and groups to existing physical names (an adopted topology).
type toyDriver struct {
	b      *toyBroker
	topics map[ports.Topic]ports.Topic
	groups map[string]string
}

var (
	_ driver.Driver        = (*toyDriver)(nil)
	_ driver.GroupDeclarer = (*toyDriver)(nil)
)

func (d *toyDriver) Name() string { return "toy" }

func (d *toyDriver) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		Broadcast:            true,
		PerMessageAck:        true,
		PublisherConfirm:     true,
		NativeBatch:          true,
		DurableGroups:        true,
		ExactRedeliveryCount: true,
		MaxMessageBytes:      1 << 20,
		InstanceGuard:        ports.InstanceRefused,
	}
}

func (d *toyDriver) topic(t ports.Topic) ports.Topic {
	if p, ok := d.topics[t]; ok {
		return p
	}
	return t
}

func (d *toyDriver) key(t ports.Topic, spec ports.SubscriptionSpec) toyKey {
	if spec.Mode == ports.Broadcast {
		return toyKey{d.topic(t), "i:" + spec.Group + ":" + spec.Instance}
	}
	g := spec.Group
	if p, ok := d.groups[g]; ok {
		g = p
	}
	return toyKey{d.topic(t), "g:" + g}
}

func (d *toyDriver) SendBatch(_ context.Context, msgs []ports.Message) []error {
	var errs []error
	for i, m := range msgs {
		m.Topic = d.topic(m.Topic)
		if err := d.b.publish(m); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = err
		}
	}
	return errs
}

func (d *toyDriver) DeclareGroup(_ context.Context, topic ports.Topic, group string) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	d.b.queueLocked(d.key(topic, ports.SubscriptionSpec{Group: group}))
	return nil
}

func (d *toyDriver) Subscribe(_ context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	k := d.key(spec.Topic, spec)
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if q := d.b.queues[k]; q != nil && q.broadcast && q.consumers > 0 {
		return nil, &ports.InstanceSharedError{Instance: spec.Instance, Where: "toy queue " + k.queue}
	}
	q := d.b.queueLocked(k)
	q.broadcast = spec.Mode == ports.Broadcast
	q.consumers++
	return &toySub{b: d.b, k: k, q: q, unacked: map[uint64]toyMsg{}}, nil
}

func (d *toyDriver) Classify(err error) driver.Class {
	for _, code := range []error{ports.ErrUnconfirmed, ports.ErrNoSubscriber} {
		if errors.Is(err, code) {
			return driver.Class{Code: code}
		}
	}
	return driver.Class{}
}

func (d *toyDriver) Close(context.Context) error { return nil }

// toySub consumes one queue.
type toySub struct {
	b       *toyBroker
	k       toyKey
	q       *toyQueue
	unacked map[uint64]toyMsg // guarded by b.mu
	lazy    bool              // DeferHeaders was called; guarded by b.mu
}

// DeferHeaders leaves the headers of a record without a transport header
// in a toyLazy (driver.HeaderDeferrer).
func (s *toySub) DeferHeaders() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.lazy = true
}

// toyLazy is a record's headers left in it (driver.LazyHeaders).
type toyLazy ports.Headers

func (l toyLazy) Lookup(name string) (string, bool) { return ports.Headers(l).Lookup(name) }
func (l toyLazy) Load() ports.Headers               { return ports.Headers(l).Clone() }

func (s *toySub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	for {
		s.b.mu.Lock()
		q := s.q
		if n := min(max, len(q.ready)); n > 0 {
			out := make([]driver.Record, n)
			for i, m := range q.ready[:n] {
				q.next++
				m.tag = q.next
				s.unacked[m.tag] = m
				out[i] = driver.Record{
					Message:         ports.Message{Topic: m.m.Topic, Key: m.m.Key, Payload: m.m.Payload, Headers: m.m.Headers.Clone(), QoS: m.m.QoS},
					RedeliveryCount: m.redelivered,
					Handle:          m.tag,
				}
				if s.lazy && !slices.ContainsFunc(m.m.Headers, func(h ports.Header) bool { return kit.TransportHeader(h.Name) }) {
					out[i].Lazy, out[i].Message.Headers = toyLazy(out[i].Message.Headers), nil
				}
			}
			q.ready = slices.Delete(q.ready, 0, n)
			s.b.mu.Unlock()
			return out, nil
		}
		wake := q.wake
		s.b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *toySub) SendAcks(_ context.Context, handles []any) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	for _, h := range handles {
		delete(s.unacked, h.(uint64))
	}
	return nil
}

// Close returns the unacked messages to the front of the queue, in the
// order they were delivered, counted as redelivered.
func (s *toySub) Close(context.Context) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.giveBackLocked(slices.Collect(maps.Keys(s.unacked)))
	q := s.q
	q.consumers--
	if q.broadcast && q.consumers == 0 {
		delete(s.b.queues, s.k)
	}
	return nil
}

// Abandon returns the unacked messages of a failed settlement to the
// front of the queue, counted as redelivered.
func (s *toySub) Abandon(handles []any) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	s.giveBackLocked(kit.Keys(handles, func(h any) uint64 { return h.(uint64) }))
}

func (s *toySub) giveBackLocked(tags []uint64) {
	var back []toyMsg
	for _, tag := range tags {
		if m, ok := s.unacked[tag]; ok {
			m.redelivered++
			back = append(back, m)
			delete(s.unacked, tag)
		}
	}
	slices.SortFunc(back, func(a, b toyMsg) int { return int(a.tag) - int(b.tag) })
	s.q.ready = append(back, s.q.ready...)
	close(s.q.wake)
	s.q.wake = make(chan struct{})
}

var (
	_ driver.RequeueCopier = (*toySub)(nil)
	_ driver.Abandoner     = (*toySub)(nil)
)

// SendRequeueCopies stores the portable layer's requeue copies in this
// subscription's queue only: sent to the topic, they would reach every
// group and Broadcast instance.
func (s *toySub) SendRequeueCopies(_ context.Context, msgs []ports.Message) []error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.b.failSends {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = ports.ErrUnconfirmed
		}
		return errs
	}
	for _, m := range msgs {
		m.Headers, m.Payload = m.Headers.Clone(), slices.Clone(m.Payload)
		s.q.ready = append(s.q.ready, toyMsg{m: m})
	}
	close(s.q.wake)
	s.q.wake = make(chan struct{})
	return nil
}

func (k toyKey) broadcast() bool { return strings.HasPrefix(k.queue, "i:") }
