package pulsar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the Pulsar implementation of ports.Adapter.
type Adapter struct {
	cfg       config
	client    pulsarclient.Client
	ownClient bool
	names     naming
	pub       *Publisher
	declared  kit.Declared // DeclareTopic's record

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed when Close has finished
	subs   map[*Subscription]struct{}
	bg     sync.WaitGroup // Subscribe calls that outlived their context
}

// New returns an adapter. Without WithClient it creates a client for the
// URL (the client connects lazily, on the first Send or Subscribe). New
// does no I/O and logs the capabilities at Info level.
func New(opts ...Option) (*Adapter, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	a := &Adapter{cfg: cfg, names: newNaming(cfg), done: make(chan struct{}), subs: map[*Subscription]struct{}{}}
	a.client = cfg.client
	if a.client == nil {
		c, err := pulsarclient.NewClient(pulsarclient.ClientOptions{
			URL:              cfg.url,
			OperationTimeout: cfg.opTimeout,
			Logger:           newErrorLogger(cfg.clientLogger, a.reportAll),
			Authentication:   cfg.auth,
			TLSConfig:        cfg.tls,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: pulsar client for %s: %w", ports.ErrInvalid, cfg.url, err)
		}
		a.client, a.ownClient = c, true
	}
	pub, err := NewPublisher(a.client, PublisherConfig{SendTimeout: cfg.sendTimeout, Chunking: cfg.chunking}, cfg.logger)
	if err != nil {
		return nil, err
	}
	a.pub = pub
	cfg.logger.Info("sluice adapter started", watermill.LogFields{
		"adapter": a.Name(), "capabilities": a.Capabilities().String(),
		"namespace": cfg.tenant + "/" + cfg.namespace, "prefix": cfg.prefix,
	})
	return a, nil
}

// Name implements ports.Adapter.
func (a *Adapter) Name() string { return "pulsar" }

// Capabilities implements ports.Adapter.
//
// ExactRedeliveryCount is false: Pulsar's redelivery count is kept in the
// broker's memory per subscription; it counts negative acks exactly while
// the subscription has a connected consumer, but is reset when the last
// consumer leaves, when the broker restarts, and when the topic moves to
// another broker. It is therefore a lower bound, so a message can get more
// attempts than RetryPolicy.MaxAttempts across such events, never fewer.
func (a *Adapter) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       true, // DeliverAfter, plus the not-before guard
		DelayedRequeue:       true, // per-message nack delay (requeueDelays)
		NativeDeadLetter:     false,
		Broadcast:            true,
		PerMessageAck:        true,
		PublisherConfirm:     true,
		NativeBatch:          false,
		SubscriptionExpiry:   false,
		DurableGroups:        true,
		ExactRedeliveryCount: false,
		Ordering:             ports.OrderNone,
		// See topology.go and docs/adapters/pulsar.md.
		StartEarliest:      true,  // SubscriptionInitialPosition
		SingleActive:       false, // Failover keeps no redelivery count
		BestEffort:         true,  // non-persistent topics (besteffort.go)
		Retention:          false, // namespace policy: admin API
		MaxLength:          false, // backlog quota: admin API
		MaxMessageBytes:    a.maxMessageBytes(),
		SizeCountsEnvelope: true,
		// An Exclusive probe of the instance's subscription (instance.go).
		InstanceGuard: ports.InstanceRefused,
	}
}

// Send implements ports.Sender through the Watermill Publisher: each
// message is stamped, mapped (key, delay, headers as properties) and sent;
// Send returns when every receipt arrived. Messages to different topics
// are published concurrently.
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	now := time.Now()
	var errs []error
	groups := map[string][]int{}
	var order []string
	wms := make([]*message.Message, len(msgs))
	for i := range msgs {
		m := msgs[i]
		if err := m.Validate(); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		t, err := a.physicalTopic(m.Topic)
		if err == nil && a.declared.QoS(&m) == ports.BestEffort {
			t = twin(t)
		}
		if err == nil {
			m.Stamp(now)
			err = a.checkSize(&m)
		}
		if err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		wm := toWatermill(&m)
		wm.SetContext(ctx)
		wms[i] = wm
		if _, ok := groups[t]; !ok {
			order = append(order, t)
		}
		groups[t] = append(groups[t], i)
	}
	results := make([][]error, len(order))
	publish := func(g int) {
		idx := groups[order[g]]
		batch := make([]*message.Message, len(idx))
		for j, i := range idx {
			batch[j] = wms[i]
		}
		results[g] = a.pub.publish(order[g], batch)
	}
	if len(order) == 1 {
		publish(0)
	} else {
		var wg sync.WaitGroup
		for g := range order {
			wg.Go(func() { publish(g) })
		}
		wg.Wait()
	}
	for g, res := range results {
		for j, err := range res {
			if err != nil {
				i := groups[order[g]][j]
				errs = append(errs, &ports.SendError{Index: i, Topic: msgs[i].Topic, Err: err})
			}
		}
	}
	return errors.Join(errs...)
}

// Subscribe implements ports.Adapter. It creates (or joins) the Shared
// subscription of spec and returns once the broker registered the
// consumer, so messages sent afterwards reach it. A new subscription starts
// at the latest message; a LOAD_BALANCE group keeps its backlog while no
// instance runs.
func (a *Adapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if a.isClosed() {
		return nil, ports.ErrClosed
	}
	spec = spec.WithDefaults()
	position, err := checkSubscription(spec)
	if err != nil {
		return nil, err
	}
	topic, err := a.physicalTopic(spec.Topic)
	if err != nil {
		return nil, err
	}
	if spec.QoS == ports.BestEffort {
		topic = twin(topic)
	}
	random := spec.Instance == ""
	if spec.Mode == ports.Broadcast && random {
		spec.Instance = randomInstance()
	}
	s := &Subscription{
		a:       a,
		spec:    spec,
		name:    a.subscriptionOf(spec),
		delays:  newRequeueDelays(a.cfg.requeueTick),
		keep:    spec.Mode == ports.LoadBalance || spec.InstanceTTL > 0,
		idle:    make(chan struct{}),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
		errs:    kit.NewErrors(a.cfg.errorsBuffer),
	}
	s.settler = newSettler(s)
	if err := a.checkInstanceFree(ctx, spec, random, topic, s.name); err != nil { // instance.go
		return nil, err
	}
	precision := int64(0) // no trimming of nack deadlines: never redeliver early
	consumer, err := a.subscribe(ctx, pulsarclient.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            s.name,
		Type:                        pulsarclient.Shared,
		SubscriptionInitialPosition: position,
		ReceiverQueueSize:           spec.InFlight,
		AckWithResponse:             true,
		NackBackoffPolicy:           s.delays,
		NackPrecisionBit:            &precision,
	})
	if err != nil {
		return nil, err
	}
	s.consumer = consumer
	if spec.QoS == ports.BestEffort {
		if err := s.awaitPermits(ctx, topic); err != nil {
			consumer.Close()
			return nil, err
		}
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		consumer.Close()
		return nil, ports.ErrClosed
	}
	a.subs[s] = struct{}{}
	a.mu.Unlock()
	return s, nil
}

// subscribe calls client.Subscribe, which blocks without a context, bounded
// by ctx. A consumer that arrives after ctx ended is closed.
func (a *Adapter) subscribe(ctx context.Context, opts pulsarclient.ConsumerOptions) (pulsarclient.Consumer, error) {
	type result struct {
		c   pulsarclient.Consumer
		err error
	}
	res := make(chan result) // unbuffered: a result nobody takes is closed below
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		c, err := a.client.Subscribe(opts)
		select {
		case res <- result{c, err}:
		case <-ctx.Done():
			if c != nil {
				c.Close()
			}
		}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, fmt.Errorf("pulsar: subscribe %s to %s: %w", opts.SubscriptionName, opts.Topic, r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close implements ports.Adapter: it stops every subscription, closes the
// producers (after their pending sends) and, when the adapter created it,
// the client. A second call waits for the first.
func (a *Adapter) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		select {
		case <-a.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a.closed = true
	subs := make([]*Subscription, 0, len(a.subs))
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
	a.bg.Wait() // bounded by the client's operation timeout
	errs = append(errs, a.pub.Close())
	if a.ownClient {
		a.client.Close()
	}
	close(a.done)
	return errors.Join(errs...)
}

// Publisher returns the adapter's Watermill publisher, for sending
// Watermill messages to Pulsar topics by their full names.
func (a *Adapter) Publisher() *Publisher { return a.pub }

// PhysicalTopic returns the persistent topic a logical topic maps to.
// An invalid or colliding topic (see physicalTopic) gives "".
func (a *Adapter) PhysicalTopic(t ports.Topic) string {
	name, err := a.physicalTopic(t)
	if err != nil {
		return ""
	}
	return name
}

func (a *Adapter) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// forget removes a stopped subscription.
func (a *Adapter) forget(s *Subscription) {
	a.mu.Lock()
	delete(a.subs, s)
	a.mu.Unlock()
}

// reportAll hands a client error to every live subscription.
func (a *Adapter) reportAll(err error) {
	a.mu.Lock()
	subs := make([]*Subscription, 0, len(a.subs))
	for s := range a.subs {
		subs = append(subs, s)
	}
	a.mu.Unlock()
	for _, s := range subs {
		s.report(err)
	}
}

var _ ports.Adapter = (*Adapter)(nil)
