package rocketmq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is a ports.Adapter over the RocketMQ 5 gRPC protocol, using the
// official v5 Go client: the portable layer (adapters/portable) over a
// driver with one producer (started on the first Send) and one
// SimpleConsumer per subscription.
type Adapter struct {
	*portable.Adapter
}

// conn is the driver: one producer and the settings of the consumers.
type conn struct {
	o        Options
	existing map[ports.Topic]Existing

	pmu      sync.Mutex
	producer rmq.Producer // nil until the first Send
	closed   bool

	// routeMu serialises the first send to each topic (see SendBatch).
	routeMu sync.Mutex
	routed  sync.Map // broker topic name → struct{}: route known to the producer
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.Driver        = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// New returns an adapter for the proxy at opts.Endpoint after one signed
// Heartbeat within opts.ConnectTimeout, so that an unreachable proxy
// (ports.ErrRefused, ErrUnreachable, ErrTimeout), a failed TLS handshake
// (ports.ErrTLS) or refused credentials (ports.ErrAuth) fail New. The
// producer starts on the first Send (the v5 client needs a topic to
// start), each consumer on Subscribe. Invalid options fail with an error
// wrapping ports.ErrInvalid.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &conn{o: o, existing: make(map[ports.Topic]Existing, len(o.Existing))}
	for _, e := range o.Existing {
		c.existing[e.Topic] = e
	}
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	return &Adapter{portable.New(c, portable.Options{Logger: o.Logger, Secrets: []string{o.AccessSecret}})}, nil
}

// Capabilities are what RocketMQ 5 does through this adapter with the
// default options, as the capability matrix shows them; an open Adapter's
// Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return (&conn{}).Capabilities() }

func (c *conn) Name() string { return "rocketmq" }

func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       true,  // SystemProperties.DeliveryTimestamp
		DelayedRequeue:       true,  // ChangeInvisibleDuration(delay)
		NativeDeadLetter:     false, // the portable layer's confirmed copy to <topic>.dlq, then Ack
		Broadcast:            true,  // one consumer group per instance
		PerMessageAck:        true,  // AckMessage per receipt handle
		CompetingConsumers:   true,  // a simple consumer group pops messages one by one
		PublisherConfirm:     true,  // SendMessage answers after the store
		NativeBatch:          false, // the client sends one message per RPC
		SubscriptionExpiry:   false, // RocketMQ keeps a group until an admin deletes it
		DurableGroups:        true,
		ExactRedeliveryCount: true,                                            // DeliveryAttempt - 1
		DeliveryLimit:        cmp.Or(c.o.DeliveryLimit, DefaultDeliveryLimit), // then %DLQ%<group>
		Ordering:             ports.OrderNone,
		StartEarliest:        false, // no consume-from-where in the v5 client
		SingleActive:         false,
		BestEffort:           false, // served at-least-once, said at Subscribe
		Retention:            false, // broker-wide fileReservedTime
		MaxMessageBytes:      MaxMessageBytes,
		SizeCountsEnvelope:   true,
		// The proxy lists no consumers: a shared Instance is refused
		// among this process's subscriptions only (instance.go).
		InstanceGuard: ports.InstanceRefusedInProcess,
	}
}

// SendBatch publishes msgs with at most Options.Parallelism RPCs at once
// and returns one error per message (nil when all were stored). A message
// larger than MaxMessageBytes with its envelope fails with a
// *ports.SizeError before any RPC.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	errs := make([]error, len(msgs))
	rms := make([]*rmq.Message, len(msgs))
	for i := range msgs {
		rms[i], errs[i] = c.toRocketMQ(&msgs[i])
	}
	var p rmq.Producer
	if i := slices.IndexFunc(rms, func(m *rmq.Message) bool { return m != nil }); i >= 0 {
		var err error
		if p, err = c.getProducer(ctx, rms[i].Topic); err != nil {
			for i := range errs {
				errs[i] = cmp.Or(errs[i], err)
			}
			return errs
		}
	}
	one := func(i int) {
		rctx, cancel := context.WithTimeout(ctx, c.o.RequestTimeout)
		defer cancel()
		if _, err := p.Send(rctx, rms[i]); err != nil {
			// The client reports a gRPC status; keep the context's
			// error in the chain so callers can test for it.
			if cerr := rctx.Err(); cerr != nil {
				err = fmt.Errorf("%w (%v)", cerr, err)
			}
			errs[i] = fmt.Errorf("%w: rocketmq send to %s: %w", ports.ErrUnconfirmed, rms[i].Topic, err)
		}
	}
	// The first send to a topic makes the client fetch its route and
	// publish its settings on the Telemetry stream; the v5 client (v5.1.4)
	// does that without serialising stream Sends, and concurrent first
	// sends hang it. So the first message to each new topic goes alone,
	// under routeMu, and the rest in parallel.
	done := make([]bool, len(msgs))
	for i, rm := range rms {
		if rm == nil {
			done[i] = true
			continue
		}
		if _, ok := c.routed.Load(rm.Topic); ok {
			continue
		}
		c.routeMu.Lock()
		if _, ok := c.routed.Load(rm.Topic); !ok {
			one(i)
			done[i] = true
			if errs[i] == nil {
				c.routed.Store(rm.Topic, struct{}{})
			}
		}
		c.routeMu.Unlock()
	}
	parallel(len(msgs), c.o.Parallelism, func(i int) {
		if !done[i] {
			one(i)
		}
	})
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// toRocketMQ maps a stamped message: headers become user properties, the
// key the message's (first) key, Delay the delivery timestamp.
func (c *conn) toRocketMQ(m *ports.Message) (*rmq.Message, error) {
	topic, err := c.topicName(m.Topic)
	if err != nil {
		return nil, err
	}
	if err := m.CheckSize(MaxMessageBytes, envelopeBytes(topic, m)); err != nil {
		return nil, err
	}
	rm := &rmq.Message{Topic: topic, Body: m.Payload}
	for _, h := range m.Headers {
		rm.AddProperty(h.Name, h.Value)
	}
	if m.Key != "" {
		rm.SetKeys(m.Key)
	}
	if m.Delay > 0 {
		rm.SetDelayTimestamp(time.Now().Add(m.Delay))
	}
	return rm, nil
}

// parallel runs f(0..n-1) with at most limit at once.
func parallel(n, limit int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
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
func (c *conn) getProducer(ctx context.Context, topic string) (rmq.Producer, error) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.producer != nil {
		return c.producer, nil
	}
	if c.closed {
		return nil, ports.ErrClosed
	}
	p, err := rmq.NewProducer(c.clientConfig(""), rmq.WithTopics(topic), rmq.WithMaxAttempts(int32(c.o.SendAttempts)))
	if err != nil {
		return nil, fmt.Errorf("rocketmq: producer for %s: %w", c.o.Endpoint, err)
	}
	sctx, cancel := context.WithTimeout(ctx, c.o.StartTimeout)
	defer cancel()
	if err := start(sctx, p, "producer", c.o.Endpoint); err != nil {
		return nil, err
	}
	c.producer = p
	c.routed.Store(topic, struct{}{})
	return p, nil
}

// Subscribe starts a SimpleConsumer for spec (validated and defaulted by
// the portable layer, which gives a Broadcast spec its Instance).
// LOAD_BALANCE uses spec.Group as the consumer group; BROADCAST uses a
// group of its own per instance ("<group>-<instance>"). The group exists
// when Subscribe returns: a new group starts at the topic's end on the
// protocol peer (Apache RocketMQ applies its consume-from-where rules;
// see the package documentation).
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	topic, err := c.topicName(spec.Topic)
	if err != nil {
		return nil, err
	}
	group, err := c.groupName(spec)
	if err != nil {
		return nil, err
	}
	unclaim, err := c.claimInstance(spec, group)
	if err != nil {
		return nil, err
	}
	sc, err := c.consumer(ctx, topic, group)
	if err != nil {
		unclaim()
		return nil, err
	}
	return newSubscription(c, spec, sc, group, unclaim), nil
}

// Close stops the producer (the portable layer closed the subscriptions).
func (c *conn) Close(context.Context) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	c.closed = true
	if c.producer == nil {
		return nil
	}
	p := c.producer
	c.producer = nil
	if err := p.GracefulStop(); err != nil {
		return fmt.Errorf("rocketmq: stop producer: %w", err)
	}
	return nil
}
