package mem

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is one process's connection to a [Broker]: it implements
// ports.Adapter, as the portable layer (adapters/portable) over the
// in-process broker's driver. Make several on one Broker to model several
// processes.
type Adapter struct {
	*portable.Adapter
	c *conn
}

// conn is the driver: one process's connection to the broker.
type conn struct {
	b        *Broker
	owner    *Adapter
	ns       string
	maxQueue int                      // WithMaxQueue: set on the queues it subscribes to
	existing map[ports.Topic]Existing // WithExisting: adopted names
	closed   atomic.Bool
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.Driver        = (*conn)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

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
	c := &conn{b: b, ns: cfg.namespace, maxQueue: cfg.maxQueue, existing: cfg.existing}
	a := &Adapter{c: c}
	c.owner = a
	if err := b.register(a); err != nil {
		return nil, err
	}
	a.Adapter = portable.New(c, portable.Options{Clock: scheduleClock{b.clock}})
	return a, nil
}

// Open returns an adapter on the process-wide [Default] broker: the
// embedded default for a service that needs no external broker.
func Open(opts ...Option) (*Adapter, error) { return New(Default(), opts...) }

// Broker returns the broker the adapter is connected to.
func (a *Adapter) Broker() *Broker { return a.c.b }

// Name returns "mem". It works on the zero Adapter.
func (a *Adapter) Name() string { return (*conn)(nil).Name() }

// Capabilities declares what the in-process broker does (see
// conn.Capabilities). It works on the zero Adapter, for the capability
// matrix.
func (a *Adapter) Capabilities() ports.Capabilities { return (*conn)(nil).Capabilities() }

// Name returns "mem".
func (c *conn) Name() string { return "mem" }

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
func (c *conn) Capabilities() ports.Capabilities {
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
func (c *conn) physical(t ports.Topic) ports.Topic {
	if e, ok := c.existing[t]; ok {
		return e.As
	}
	return t
}

// queueKey names the queue of (topic, mode, group) for this adapter;
// adopted is true when WithExisting maps the group to an existing queue.
func (c *conn) queueKey(topic ports.Topic, mode ports.Mode, group string) (key queueKey, adopted bool) {
	key = queueKey{ns: c.ns, topic: c.physical(topic), mode: mode, group: group}
	if e, ok := c.existing[topic]; ok && mode == ports.LoadBalance {
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

// Subscribe joins (or creates) spec's queue (the portable layer validated
// spec and gave a Broadcast one its Instance): for LoadBalance the queue
// of (Topic, Group), shared by every instance of the group and kept while
// none runs; for Broadcast the queue of (Topic, Group, Instance).
// Messages published after Subscribe returns reach the queue; messages
// published before the queue first existed were dropped.
//
// A queue's KeyFilter is set by the subscription that starts its first
// consumer; a subscription with a different filter is refused
// (ports.ErrInvalid) while consumers with the old one run.
func (c *conn) Subscribe(_ context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	key, adopted := c.queueKey(spec.Topic, spec.Mode, spec.Group)
	key.instance = spec.Instance
	if spec.Mode != ports.Broadcast {
		key.instance = ""
	}
	q, err := c.b.join(key, spec, c.maxQueue, adopted)
	if err != nil {
		return nil, err
	}
	return newSubscription(c, q, spec), nil
}

// Classify gives the broker's errors their portable codes. The in-process
// broker has no connection, so nothing is retryable.
func (c *conn) Classify(err error) driver.Class {
	for _, code := range []error{ports.ErrUnconfirmed, ports.ErrNoSubscriber, ports.ErrClosed} {
		if errors.Is(err, code) {
			return driver.Class{Code: code}
		}
	}
	return driver.Class{}
}

// Close detaches the connection from the broker (the portable layer
// stopped its subscriptions first, returning their unsettled deliveries
// to their queues). The broker and its queues live on for other adapters.
func (c *conn) Close(context.Context) error {
	c.closed.Store(true)
	c.b.unregister(c.owner)
	return nil
}
