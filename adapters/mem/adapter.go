package mem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is one process's connection to a [Broker]: the portable layer
// over the broker's driver. Several on one Broker model several processes.
type Adapter struct {
	*portable.Adapter
	c *conn
}

// conn is the driver: one process's connection to the broker.
type conn struct {
	b        *Broker
	owner    *Adapter
	ns       string
	maxQueue int
	existing map[ports.Topic]Existing
	closed   atomic.Bool
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
	_ driver.Requeuer      = (*subscription)(nil)
	_ driver.DeadLetterer  = (*subscription)(nil)
	_ driver.Dropper       = (*subscription)(nil)
)

// New returns an adapter on broker b (ports.ErrInvalid for a nil broker
// or an invalid option, ports.ErrClosed for a closed one).
func New(b *Broker, opts ...Option) (*Adapter, error) {
	if b == nil {
		return nil, valueError("mem.New", "broker must not be nil (use mem.Open for the default broker)")
	}
	cfg := adapterConfig{maxQueue: DefaultMaxQueue}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	c := &conn{b: b, ns: cfg.namespace, maxQueue: cfg.maxQueue, existing: cfg.existing}
	a := &Adapter{c: c}
	c.owner = a
	if err := b.declare(context.Background(), c, func() error { b.adapters[a] = struct{}{}; return nil }); err != nil {
		return nil, err
	}
	a.Adapter = portable.New(c, portable.Options{Clock: b.clock})
	return a, nil
}

// Open returns an adapter on the process-wide [Default] broker.
func Open(opts ...Option) (*Adapter, error) { return New(Default(), opts...) }

// Broker returns the broker the adapter is connected to.
func (a *Adapter) Broker() *Broker { return a.c.b }

// Capabilities are what the in-process broker does through this adapter
// with the default options, as the capability matrix shows them; an open
// Adapter's Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return (&conn{}).Capabilities() }

func (c *conn) Name() string { return "mem" }

// MaxMessageBytes is the largest payload Send accepts.
const MaxMessageBytes = 64 << 20

// Capabilities declares everything but ordering: competing consumers and
// requeues reorder a FIFO queue.
func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage: true, DelayedRequeue: true, NativeDeadLetter: true, Broadcast: true,
		PerMessageAck: true, CompetingConsumers: true, PublisherConfirm: true, NativeBatch: true, SubscriptionExpiry: true,
		DurableGroups: true, ExactRedeliveryCount: true, Ordering: ports.OrderNone,
		StartEarliest: true, SingleActive: true, BestEffort: true, Retention: true, MaxLength: true,
		MaxMessageBytes: MaxMessageBytes, InstanceGuard: ports.InstanceRefused,
	}
}

// physical returns the broker topic of t (WithExisting's As, or t).
func (c *conn) physical(t ports.Topic) ports.Topic {
	if e, ok := c.existing[t]; ok {
		return e.As
	}
	return t
}

// queueKey names spec's queue; adopted: WithExisting maps its group to an
// existing queue.
func (c *conn) queueKey(spec ports.SubscriptionSpec) (key queueKey, adopted bool) {
	key = queueKey{ns: c.ns, topic: c.physical(spec.Topic), mode: spec.Mode, group: spec.Group}
	if spec.Mode == ports.Broadcast {
		key.instance = spec.Instance
	} else if g, ok := c.existing[spec.Topic].Groups[spec.Group]; ok {
		key.group, adopted = g, true
	}
	return key, adopted
}

// missingQueue is the error for an adopted queue that does not exist.
func missingQueue(topic ports.Topic, group string, key queueKey) error {
	return fmt.Errorf("%w: mem.WithExisting maps group %q of topic %q to the existing queue %s, which does not exist on the broker: it is never created by an adopting adapter (create it with the existing names first, or drop the mapping)",
		ports.ErrInvalid, group, string(topic), key)
}

// Subscribe joins (or creates) the queue of (Topic, Group), or of
// (Topic, Group, Instance) for Broadcast.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	key, adopted := c.queueKey(spec)
	var q *queue
	err := c.b.declare(ctx, c, func() (err error) { q, err = c.b.joinLocked(key, spec, c.maxQueue, adopted); return err })
	if err != nil {
		return nil, err
	}
	return newSubscription(c, q, spec), nil
}

// Classify gives the broker's errors their codes; none is retryable.
func (c *conn) Classify(err error) driver.Class {
	for _, code := range []error{ports.ErrUnconfirmed, ports.ErrNoSubscriber, ports.ErrClosed} {
		if errors.Is(err, code) {
			return driver.Class{Code: code}
		}
	}
	return driver.Class{}
}

// Close detaches the connection; the broker lives on.
func (c *conn) Close(context.Context) error {
	c.closed.Store(true)
	c.b.mu.Lock()
	delete(c.b.adapters, c.owner)
	c.b.mu.Unlock()
	return nil
}

// DeclareGroup creates group's queue on topic, which keeps what is sent
// from now on; an adopted group's queue must exist.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	return c.b.declare(ctx, c, func() error { return c.declareGroupLocked(topic, group) })
}

// declareGroupLocked is DeclareGroup under b.mu.
func (c *conn) declareGroupLocked(topic ports.Topic, group string) error {
	key, adopted := c.queueKey(ports.SubscriptionSpec{Topic: topic, Group: group})
	if !adopted {
		c.b.queueLocked(key)
	} else if c.b.queues[key] == nil {
		return missingQueue(topic, group, key)
	}
	return nil
}

// DeclareTopic keeps spec on the broker for every adapter of the
// namespace and declares its groups; other properties than recorded fail
// with a *ports.RedeclareError. An adopted topic is only checked.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return c.b.declare(ctx, c, func() error {
		tk := topicKey{c.ns, c.physical(spec.Topic)}
		t := c.b.topicLocked(tk)
		_, adopted := c.existing[spec.Topic]
		old, want, name := t.spec, spec, string(spec.Topic)
		if adopted { // checked, not recorded: the existing topology has the groups it has
			want.Groups, old.Groups = nil, nil
			name = fmt.Sprintf("%s (existing topic %s)", spec.Topic, tk.topic)
		}
		if diffs := ports.DiffTopicSpecs(old, want); len(diffs) > 0 && (old.Topic != "" || adopted) {
			return &ports.RedeclareError{Name: name, Diffs: diffs}
		}
		if old.Topic != "" && !adopted {
			return nil // declared already
		}
		for _, g := range spec.Groups {
			if err := c.declareGroupLocked(spec.Topic, g); err != nil {
				return err
			}
		}
		if !adopted {
			spec.Groups = slices.Clone(spec.Groups)
			t.mu.Lock()
			t.spec = spec
			t.mu.Unlock()
		}
		return nil
	})
}

// SendForeign stores payload on topic as a producer without sluice's
// envelope would: headers as given, nothing stamped (no identity without
// HeaderID). For tests that consume other programs' messages.
func (a *Adapter) SendForeign(ctx context.Context, topic ports.Topic, payload []byte, headers ports.Headers) error {
	if err := topic.Validate(); err != nil {
		return err
	}
	h := headers.Clone()
	if h == nil {
		h = ports.Headers{}
	}
	return a.c.sendOne(ctx, &ports.Message{Topic: topic, Payload: payload, Headers: h})
}
