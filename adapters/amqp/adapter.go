package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the RabbitMQ implementation of ports.Adapter. It is safe for
// concurrent use. Create it with New; release it with Close.
type Adapter struct {
	opts   Options
	topo   *topology
	pubC   *connector
	subC   *connector
	pub    *publisher
	caps   ports.Capabilities
	faults *faults

	declared kit.Declared // topics declared with DeclareTopic
	existing *Existing    // adopted names (Options.Existing)

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
}

var _ ports.Adapter = (*Adapter)(nil)

// faults lets this package's tests make the broker refuse publishes
// (routing them to a key with no binding, so RabbitMQ returns them).
type faults struct {
	sends       atomic.Bool
	deadLetters atomic.Bool
}

// faultKey is a routing key nothing is bound to.
const faultKey = "~sluice-fault-unroutable"

// New validates opts, connects to the broker and declares the adapter's
// exchanges. It fails when the broker cannot be reached within
// opts.DialTimeout (or ctx).
func New(ctx context.Context, opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	a := &Adapter{
		opts:   opts,
		topo:   newTopology(opts),
		pubC:   newConnector("publish", opts),
		subC:   newConnector("consume", opts),
		faults: opts.faults,
		subs:   map[*subscription]struct{}{},

		existing: opts.Existing,
	}
	if a.faults == nil {
		a.faults = &faults{}
	}
	a.pub = newPublisher(a.pubC, a.topo, opts)
	a.caps = capabilities(opts.QueueType)
	a.caps.MaxMessageBytes = opts.MaxMessageBytes
	ch, err := a.pubC.channel(ctx)
	if err != nil {
		return nil, err
	}
	err = a.topo.declareExchanges(ch)
	ch.Close()
	if err == nil {
		err = opts.Existing.check(ctx, a.pubC.channel)
	}
	if err != nil {
		a.pubC.close(context.Background())
		return nil, fmt.Errorf("amqp: %w", err)
	}
	opts.Logger.Info("sluice adapter started", "adapter", a.Name(), "namespace", opts.Namespace,
		"queue_type", string(opts.QueueType), "capabilities", a.caps.String())
	return a, nil
}

// Name returns "amqp".
func (a *Adapter) Name() string { return "amqp" }

// Capabilities declares what RabbitMQ does natively through this adapter:
// delayed messages and delayed requeues (delay queues with a message TTL
// that dead-letter into the topic), broadcast, per-message ack, publisher
// confirms, subscription expiry (x-expires), durable groups, and an exact
// redelivery count on quorum queues. Dead letters go to an explicit
// "<topic>.dlq" topic with a confirmed publish (RabbitMQ's own DLX does not
// confirm to the client), batches are formed by Receive over the prefetch
// and settled with multiple-acks, and there is no ordering guarantee.
//
// Of the topic properties: retention (x-message-ttl) and max length
// (x-max-length) on the group queues, single-active consumers
// (x-single-active-consumer) and best effort (transient messages on a
// non-durable classic queue) are native; a new group cannot start at the
// earliest message (a queue holds only what was routed to it after it was
// declared), so StartEarliest is refused. MaxMessageBytes is
// Options.MaxMessageBytes and counts the payload only.
//
// The zero Adapter (not made by New) reports the defaults' capabilities
// (quorum queues), so a capability table can be built without a broker.
func (a *Adapter) Capabilities() ports.Capabilities {
	if a.opts.QueueType == "" {
		return capabilities(Quorum)
	}
	return a.caps
}

// capabilities are the adapter's capabilities with queues of type qt.
func capabilities(qt QueueType) ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       true,
		DelayedRequeue:       true,
		NativeDeadLetter:     false,
		Broadcast:            true,
		PerMessageAck:        true,
		PublisherConfirm:     true,
		NativeBatch:          false,
		SubscriptionExpiry:   true,
		DurableGroups:        true,
		ExactRedeliveryCount: qt == Quorum,
		Ordering:             ports.OrderNone,
		StartEarliest:        false,
		SingleActive:         true,
		BestEffort:           true,
		Retention:            true,
		MaxLength:            true,
		MaxMessageBytes:      DefaultMaxMessageBytes,
		SizeCountsEnvelope:   false,
		InstanceGuard:        ports.InstanceRefused,
	}
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Send publishes msgs with publisher confirms and returns when the broker
// confirmed each of them or ctx is done. Messages go to the namespace's
// direct exchange under their topic; every queue bound to the topic gets a
// copy. Publishes are mandatory: a message that reaches no queue (no
// subscription or declared group for its topic) is returned by the broker
// and fails with an *UnconfirmedError that is ports.ErrNoSubscriber,
// unless Options.DropUnroutable. A message with
// a Delay goes through a delay queue and is confirmed when it is stored
// there. Messages of one call are published in order on one channel.
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	var errs []error
	items := make([]item, 0, len(msgs))
	index := make([]int, 0, len(msgs))
	now := nowStamp()
	for i := range msgs {
		m := &msgs[i]
		it, err := a.sendItem(m, now)
		if err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		if a.faults.sends.Load() {
			it.key, it.mandatory = faultKey, true
		}
		if m.Delay > 0 {
			a.pub.delayed(&it, m.Delay)
		}
		items = append(items, it)
		index = append(index, i)
	}
	for j, err := range a.pub.publishAll(ctx, items) {
		if err != nil {
			i := index[j]
			errs = append(errs, &ports.SendError{Index: i, Topic: msgs[i].Topic, Err: err})
		}
	}
	return errors.Join(errs...)
}

// Subscribe declares the subscription's queue (LOAD_BALANCE: a durable
// queue shared by the group; BROADCAST: a queue per instance with
// x-expires), binds it to the topic, starts consuming with a prefetch of
// spec.InFlight and returns once the broker confirmed the consumer.
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := a.checkSpec(spec); err != nil {
		return nil, err
	}
	spec = spec.WithDefaults()
	if spec.Mode == ports.Broadcast && spec.Instance == "" {
		spec.Instance = ports.NewID()
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ports.ErrClosed
	}
	s := newSubscription(a, spec)
	a.subs[s] = struct{}{}
	a.mu.Unlock()
	if err := s.start(ctx); err != nil {
		a.forget(s)
		return nil, err
	}
	return s, nil
}

func (a *Adapter) forget(s *subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}

// Close stops every subscription (handing unsettled deliveries back to the
// broker), fails outstanding publishes as unconfirmed and closes both
// connections. It is idempotent.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
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
	if err := a.subC.close(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := a.pubC.close(ctx); err != nil {
		errs = append(errs, err)
	}
	a.pub.close()
	return errors.Join(errs...)
}
