package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is a ports.Adapter over the RocketMQ 5 gRPC protocol, using the
// official v5 Go client: one producer (started on the first Send) and one
// SimpleConsumer per subscription.
type Adapter struct {
	cfg      config
	declared kit.Declared // DeclareTopic's record

	pmu      sync.Mutex
	producer rmq.Producer // nil until the first Send

	// routeMu serialises the first send to each topic (see warm).
	routeMu sync.Mutex
	routed  sync.Map // broker topic name → struct{}: route known to the producer

	mu     sync.Mutex
	closed bool
	subs   map[*Subscription]struct{}
}

var _ ports.Adapter = (*Adapter)(nil)

// New returns an adapter for the proxy named by WithEndpoint. It does not
// connect: the producer starts on the first Send (the v5 client needs a
// topic to start), each consumer on Subscribe.
func New(opts ...Option) (*Adapter, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("%w: %w", ports.ErrInvalid, err)
		}
	}
	if cfg.endpoint == "" {
		return nil, fmt.Errorf("%w: rocketmq: no endpoint: use WithEndpoint(\"host:8081\")", ports.ErrInvalid)
	}
	return &Adapter{cfg: cfg, subs: make(map[*Subscription]struct{})}, nil
}

// Name returns "rocketmq".
func (a *Adapter) Name() string { return "rocketmq" }

// Capabilities of the adapter.
func (a *Adapter) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       true,  // SystemProperties.DeliveryTimestamp
		DelayedRequeue:       true,  // ChangeInvisibleDuration(delay)
		NativeDeadLetter:     false, // a confirmed publish to <topic>.dlq, then Ack
		Broadcast:            true,  // one consumer group per instance
		PerMessageAck:        true,  // AckMessage per receipt handle
		PublisherConfirm:     true,  // SendMessage answers after the store
		NativeBatch:          false, // the client sends one message per RPC
		SubscriptionExpiry:   false, // RocketMQ keeps a group until an admin deletes it
		DurableGroups:        true,
		ExactRedeliveryCount: true, // DeliveryAttempt - 1
		Ordering:             ports.OrderNone,
		// See topology.go and docs/adapters/rocketmq.md.
		StartEarliest:      false, // no consume-from-where in the v5 client
		SingleActive:       false,
		BestEffort:         false, // served at-least-once, said at Subscribe
		Retention:          false, // broker-wide fileReservedTime
		MaxLength:          false,
		MaxMessageBytes:    MaxMessageBytes,
		SizeCountsEnvelope: true,
		// The proxy lists no consumers: a shared Instance is refused
		// among this process's subscriptions only (instance.go).
		InstanceGuard: ports.InstanceRefusedInProcess,
	}
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// Send publishes msgs with confirms; it returns when every message was
// stored or failed, with one *ports.SendError per failed message.
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	now := time.Now()
	stamped := make([]ports.Message, len(msgs))
	var errs []error
	for i := range msgs {
		m := msgs[i]
		if err := m.Validate(); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			stamped[i].Topic = "" // skipped below
			continue
		}
		if name, err := a.topicName(m.Topic); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			stamped[i].Topic = ""
			continue
		} else if err := m.CheckSize(MaxMessageBytes, envelopeBytes(name, &m)); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			stamped[i].Topic = ""
			continue
		}
		m.Stamp(now)
		stamped[i] = m
	}
	for i, err := range a.publish(ctx, stamped) {
		if err != nil && stamped[i].Topic != "" {
			errs = append(errs, &ports.SendError{Index: i, Topic: msgs[i].Topic, Err: err})
		}
	}
	return errors.Join(errs...)
}

// publish sends msgs (already stamped; an empty Topic is skipped) with at
// most cfg.parallelism RPCs at once and returns one error per message.
func (a *Adapter) publish(ctx context.Context, msgs []ports.Message) []error {
	errs := make([]error, len(msgs))
	first := -1
	for i := range msgs {
		if msgs[i].Topic != "" {
			first = i
			break
		}
	}
	if first < 0 {
		return errs
	}
	p, err := a.getProducer(ctx, msgs[first].Topic)
	if err != nil {
		for i := range msgs {
			errs[i] = err
		}
		return errs
	}
	one := func(i int) {
		m, err := a.toRocketMQ(&msgs[i], time.Now())
		if err != nil {
			errs[i] = err
			return
		}
		rctx, cancel := context.WithTimeout(ctx, a.cfg.requestTimeout)
		defer cancel()
		if _, err := p.Send(rctx, m); err != nil {
			if cerr := rctx.Err(); cerr != nil {
				// The client reports a gRPC status; keep the context's
				// error in the chain so callers can test for it.
				errs[i] = fmt.Errorf("rocketmq: send to %s not confirmed: %w (%v)", m.Topic, cerr, err)
				return
			}
			errs[i] = fmt.Errorf("rocketmq: send to %s not confirmed: %w", m.Topic, err)
		}
	}
	// The first send to a topic makes the client fetch its route and
	// publish its settings on the Telemetry stream; the v5 client (v5.1.3)
	// does that without serialising stream Sends, and concurrent first
	// sends hang it. So the first message to each new topic goes alone,
	// under routeMu, and the rest in parallel.
	done := make([]bool, len(msgs))
	for i := range msgs {
		if msgs[i].Topic == "" {
			done[i] = true
			continue
		}
		name, err := a.topicName(msgs[i].Topic)
		if err != nil {
			errs[i], done[i] = err, true
			continue
		}
		if _, ok := a.routed.Load(name); ok {
			continue
		}
		a.routeMu.Lock()
		if _, ok := a.routed.Load(name); !ok {
			one(i)
			done[i] = true
			if errs[i] == nil {
				a.routed.Store(name, struct{}{})
			}
		}
		a.routeMu.Unlock()
	}
	parallel(len(msgs), a.cfg.parallelism, func(i int) {
		if !done[i] {
			one(i)
		}
	})
	return errs
}

// parallel runs f(0..n-1) with at most limit at once.
func parallel(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// getProducer returns the adapter's producer, starting it with topic as
// its first route (the v5 client cannot start without one).
func (a *Adapter) getProducer(ctx context.Context, topic ports.Topic) (rmq.Producer, error) {
	a.pmu.Lock()
	defer a.pmu.Unlock()
	if a.producer != nil {
		return a.producer, nil
	}
	if a.isClosed() {
		return nil, ports.ErrClosed
	}
	name, err := a.topicName(topic)
	if err != nil {
		return nil, err
	}
	p, err := rmq.NewProducer(a.cfg.clientConfig(""), rmq.WithTopics(name), rmq.WithMaxAttempts(a.cfg.sendAttempts))
	if err != nil {
		return nil, fmt.Errorf("rocketmq: producer for %s: %w", a.cfg.endpoint, err)
	}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.startTimeout)
	defer cancel()
	if err := start(sctx, p, "producer", a.cfg.endpoint); err != nil {
		return nil, err
	}
	a.producer = p
	a.routed.Store(name, struct{}{})
	return p, nil
}

// Subscribe starts a SimpleConsumer for spec. LOAD_BALANCE uses
// spec.Group as the consumer group; BROADCAST uses a group of its own per
// instance ("<group>-<instance>", the instance random when not given). The
// group exists when Subscribe returns: a new group starts at the topic's
// end on the protocol peer (Apache RocketMQ applies its consume-from-where
// rules; see the package documentation).
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if a.isClosed() {
		return nil, ports.ErrClosed
	}
	spec = spec.WithDefaults()
	if err := a.checkSubscription(spec); err != nil {
		return nil, err
	}
	s, err := newSubscription(ctx, a, spec)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = s.Stop(context.Background())
		return nil, ports.ErrClosed
	}
	a.subs[s] = struct{}{}
	a.mu.Unlock()
	return s, nil
}

func (a *Adapter) forget(s *Subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}

// Close stops every subscription (releasing their unsettled messages) and
// the producer. It is idempotent.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	subs := make([]*Subscription, 0, len(a.subs))
	for s := range a.subs {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	var errs []error
	for _, s := range subs {
		if err := s.Stop(ctx); err != nil && !errors.Is(err, ports.ErrClosed) {
			errs = append(errs, err)
		}
	}
	a.pmu.Lock()
	if a.producer != nil {
		if err := a.producer.GracefulStop(); err != nil {
			errs = append(errs, fmt.Errorf("rocketmq: stop producer: %w", err))
		}
		a.producer = nil
	}
	a.pmu.Unlock()
	return errors.Join(errs...)
}
