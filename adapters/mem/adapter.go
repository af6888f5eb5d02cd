package mem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicemq/sluice/ports"
)

// Adapter is one process's connection to a [Broker]: it implements
// ports.Adapter. Make several on one Broker to model several processes.
type Adapter struct {
	b        *Broker
	ns       string
	maxQueue int                      // WithMaxQueue: set on the queues it subscribes to
	existing map[ports.Topic]Existing // WithExisting: adopted names

	mu     sync.Mutex
	subs   map[*subscription]struct{}
	closed atomic.Bool // written under mu
}

var _ ports.Adapter = (*Adapter)(nil)

// New returns an adapter on broker b. It fails with an error wrapping
// ports.ErrInvalid for a nil broker or an invalid option, and with
// ports.ErrClosed when b is closed.
func New(b *Broker, opts ...Option) (*Adapter, error) {
	if b == nil {
		return nil, valueError("mem.New", "broker must not be nil (use mem.Open for the default broker)")
	}
	cfg := adapterConfig{maxQueue: DefaultMaxQueue}
	for _, o := range opts {
		if err := o.applyAdapter(&cfg); err != nil {
			return nil, err
		}
	}
	a := &Adapter{b: b, ns: cfg.namespace, maxQueue: cfg.maxQueue, existing: cfg.existing, subs: map[*subscription]struct{}{}}
	if err := b.register(a); err != nil {
		return nil, err
	}
	return a, nil
}

// Open returns an adapter on the process-wide [Default] broker: the
// embedded default for a service that needs no external broker.
func Open(opts ...Option) (*Adapter, error) { return New(Default(), opts...) }

// Broker returns the broker the adapter is connected to.
func (a *Adapter) Broker() *Broker { return a.b }

// Name returns "mem".
func (a *Adapter) Name() string { return "mem" }

// MaxMessageBytes is the largest payload Send accepts (64 MiB); the
// envelope is not counted. A larger message fails with a *ports.SizeError
// before anything is stored.
const MaxMessageBytes = 64 << 20

// Capabilities declares everything except ordering: the in-process broker
// delays, dead-letters to "<topic>.dlq" with a synchronous confirm,
// broadcasts, settles per message and per batch, expires idle instances,
// keeps group backlogs and counts redeliveries exactly; it starts a new
// group at the earliest message of the topic's bounded history
// ([WithHistory]), keeps a single-active group's messages for one
// consumer at a time, has a native best-effort class (dropped by a full
// queue, never requeued or dead-lettered), enforces TopicSpec.Retention
// and MaxLength, and accepts payloads up to [MaxMessageBytes]. Ordering is
// OrderNone: a queue is FIFO, but competing consumers and requeues
// reorder.
func (a *Adapter) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       true,
		DelayedRequeue:       true,
		NativeDeadLetter:     true,
		Broadcast:            true,
		PerMessageAck:        true,
		PublisherConfirm:     true,
		NativeBatch:          true,
		SubscriptionExpiry:   true,
		DurableGroups:        true,
		ExactRedeliveryCount: true,
		Ordering:             ports.OrderNone,
		StartEarliest:        true,
		SingleActive:         true,
		BestEffort:           true,
		Retention:            true,
		MaxLength:            true,
		MaxMessageBytes:      MaxMessageBytes,
		InstanceGuard:        ports.InstanceRefused,
	}
}

// physical returns the broker topic of logical topic t: the existing name
// WithExisting maps it to, or t itself.
func (a *Adapter) physical(t ports.Topic) ports.Topic {
	if e, ok := a.existing[t]; ok {
		return e.As
	}
	return t
}

// queueKey names the queue of (topic, mode, group) for this adapter;
// adopted is true when WithExisting maps the group to an existing queue.
func (a *Adapter) queueKey(topic ports.Topic, mode ports.Mode, group string) (key queueKey, adopted bool) {
	key = queueKey{ns: a.ns, topic: a.physical(topic), mode: mode, group: group}
	if e, ok := a.existing[topic]; ok && mode == ports.LoadBalance {
		if g, ok := e.Groups[group]; ok {
			key.group, adopted = g, true
		}
	}
	return key, adopted
}

// missingQueue is the error for an adopted queue that does not exist.
func missingQueue(topic ports.Topic, group string, key queueKey) error {
	return fmt.Errorf("%w: mem.WithExisting maps group %q of topic %q to the existing queue %s, which does not exist on the broker: it is never created by an adopting adapter (create it with the existing names first, or drop the mapping)",
		ports.ErrInvalid, group, string(topic), key)
}

// Subscribe validates spec and joins (or creates) its queue: for
// LoadBalance the queue of (Topic, Group), shared by every instance of the
// group and kept while none runs; for Broadcast the queue of (Topic,
// Group, Instance), with a random Instance when none is given. Messages
// published after Subscribe returns reach the queue; messages published
// before the queue first existed were dropped.
//
// A queue's KeyFilter is set by the subscription that starts its first
// consumer; a subscription with a different filter is refused
// (ports.ErrInvalid) while consumers with the old one run.
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	key, adopted := a.queueKey(spec.Topic, spec.Mode, spec.Group)
	if spec.Mode == ports.Broadcast {
		if spec.Instance == "" {
			spec.Instance = ports.NewID()
		}
		key.instance = spec.Instance
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, ports.ErrClosed
	}
	q, err := a.b.join(key, spec, a.maxQueue, adopted)
	if err != nil {
		return nil, err
	}
	s := newSubscription(a, q, spec)
	a.subs[s] = struct{}{}
	return s, nil
}

// Close stops every subscription of the adapter (returning their unsettled
// deliveries to their queues, acking nothing) and detaches it from the
// broker. It is idempotent; later Send and Subscribe calls return
// ports.ErrClosed. The broker and its queues live on for other adapters.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed.Load() {
		a.mu.Unlock()
		return nil
	}
	a.closed.Store(true)
	subs := make([]*subscription, 0, len(a.subs))
	for s := range a.subs {
		subs = append(subs, s)
	}
	a.mu.Unlock()

	var errs []error
	for _, s := range subs {
		if err := s.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	a.b.unregister(a)
	return errors.Join(errs...)
}

// forget drops a stopped subscription.
func (a *Adapter) forget(s *subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}
