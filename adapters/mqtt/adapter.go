package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the MQTT 5 ports.Adapter: the portable layer over the MQTT
// driver. Make one with New and Close it.
type Adapter struct {
	*portable.Adapter
	c *conn
}

// conn is the driver: the sender's connection; subscriptions have their own.
type conn struct {
	opts        Options
	url         string
	broker      *embedded.Broker // when Options.Embedded
	pub         *autopaho.ConnectionManager
	declared    kit.Declared  // DeclareTopic's record (retention and class at Send)
	instanceSet bool          // Options.Instance was given (DeclareGroup needs it)
	maxPacket   atomic.Uint32 // the sender's CONNACK Maximum Packet Size (0: none announced)

	publishFault func(topic string) error  // tests: fails publishes before they are written
	arrived      func(id string, dup bool) // tests: sees every PUBLISH a subscription receives

	mu        sync.Mutex
	closed    bool
	subs      map[*subscription]struct{}
	clientIDs map[string]bool // client ids of live subscriptions
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.Driver        = (*conn)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// New validates opts, starts the embedded broker when asked and returns
// once the sender is connected. It fails at once with ports.ErrRefused
// when nothing listens at the address, ports.ErrAuth or (mqtts:// only)
// ports.ErrTLS when the broker refuses the client, otherwise after
// Options.ConnectTimeout or when ctx is done.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	instanceSet := opts.Instance != ""
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &conn{opts: opts, url: opts.URL, instanceSet: instanceSet, subs: map[*subscription]struct{}{}, clientIDs: map[string]bool{}}
	if opts.Embedded {
		b, err := embedded.Start(embedded.Options{})
		if err != nil {
			return nil, err
		}
		c.broker, c.url = b, b.URL()
	}
	pub, err := c.connect(ctx, connSpec{clientID: opts.Namespace + ":pub:" + opts.Instance + ":" + randomID(), cleanStart: true, onUp: c.senderUp,
		report: func(err error) { opts.Logger.Warn("sluice mqtt: sender connection", "error", err) }})
	if err != nil {
		if c.broker != nil {
			_ = c.broker.Close()
		}
		return nil, err
	}
	c.pub = pub
	var secrets []string
	if opts.Password != "" {
		secrets = []string{opts.Password}
	}
	return &Adapter{Adapter: portable.New(c, portable.Options{Logger: opts.Logger, Secrets: secrets}), c: c}, nil
}

// Name is "mqtt", also on the zero Adapter.
func (a *Adapter) Name() string { return (*conn)(nil).Name() }

// Capabilities declares what MQTT 5 gives natively, also on the zero
// Adapter (the protocol's packet limit then).
func (a *Adapter) Capabilities() ports.Capabilities {
	if a == nil || a.c == nil {
		return (*conn)(nil).Capabilities()
	}
	return a.c.Capabilities()
}

// Name is "mqtt".
func (c *conn) Name() string { return "mqtt" }

// Capabilities declares what MQTT 5 gives natively (see docs/adapters/mqtt.md).
func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       false, // held on the consumer (the portable layer's scheduler)
		DelayedRequeue:       false, // held on the consumer
		NativeDeadLetter:     false, // a confirmed copy to "<ns>/<topic>/dlq"
		Broadcast:            true,  // a plain subscription per instance
		PerMessageAck:        false, // PUBACKs go out in arrival order
		PublisherConfirm:     true,  // QoS 1 PUBACK
		SubscriptionExpiry:   true,  // session expiry interval
		DurableGroups:        true,  // in the members' sessions: a member comes back with its instance
		ExactRedeliveryCount: false, // a broker redelivery (DUP) counts at least 1
		Ordering:             ports.OrderNone,
		StartEarliest:        false, // no history: retained messages are one per topic
		SingleActive:         false, // shared subscriptions spread over every member
		BestEffort:           true,  // QoS 0
		Retention:            true,  // Message Expiry Interval on every PUBLISH
		MaxMessageBytes:      c.maxMessageBytes(),
		SizeCountsEnvelope:   true,                   // the limit is the PUBLISH packet's
		InstanceGuard:        ports.InstanceDetected, // the displaced session reports ErrInstanceShared
	}
}

// senderUp records the broker's Maximum Packet Size.
func (c *conn) senderUp(_ *autopaho.ConnectionManager, ca *paho.Connack) {
	if ca != nil && ca.Properties != nil && ca.Properties.MaximumPacketSize != nil {
		c.maxPacket.Store(*ca.Properties.MaximumPacketSize)
	}
}

// SendBatch publishes msgs concurrently on the sender connection and
// returns after the broker acknowledged every one.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	if len(msgs) == 1 {
		if err := c.send(ctx, &msgs[0]); err != nil {
			return []error{err}
		}
		return nil
	}
	errs := make([]error, len(msgs))
	var failed atomic.Bool
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = c.send(ctx, &msgs[i]); errs[i] != nil {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	if !failed.Load() {
		return nil
	}
	return errs
}

func (c *conn) send(ctx context.Context, m *ports.Message) error {
	p := toPublish(c.physical(m.Topic), m)
	if c.declared.QoS(m) == ports.BestEffort {
		p.QoS = 0
	}
	if r := c.declared.Retention(m.Topic); r > 0 {
		s := seconds(r)
		p.Properties.MessageExpiry = &s
	}
	if err := m.CheckSize(c.maxMessageBytes(), envelopeBytes(p)); err != nil {
		return err
	}
	return c.publish(ctx, p)
}

// publish sends p and waits for the PUBACK. A reason code below 0x80 (0,
// or 16: no matching subscribers) confirms; anything else is
// ErrUnconfirmed, but ctx errors.
func (c *conn) publish(ctx context.Context, p *paho.Publish) error {
	if c.publishFault != nil {
		if err := c.publishFault(p.Topic); err != nil {
			return fmt.Errorf("%w: %v", ports.ErrUnconfirmed, err)
		}
	}
	for {
		resp, err := c.pub.Publish(ctx, p)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, autopaho.ConnectionDownError):
			// Not yet written: wait for the connection (bounded by ctx).
			if werr := c.pub.AwaitConnection(ctx); werr != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("%w: %v", ports.ErrUnconfirmed, werr)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case resp != nil && resp.ReasonCode >= 0x80:
			reason := ""
			if resp.Properties != nil {
				reason = resp.Properties.ReasonString
			}
			return fmt.Errorf("%w: PUBACK reason code 0x%02x %s", ports.ErrUnconfirmed, resp.ReasonCode, reason)
		default:
			return fmt.Errorf("%w: %v", ports.ErrUnconfirmed, err)
		}
	}
}

// Classify maps the adapter's errors to portable codes. ErrTLS comes only
// from an mqtts:// connection (see explainConnect).
func (c *conn) Classify(err error) driver.Class {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return driver.Class{Code: ports.ErrRefused, Retryable: true}
	case errors.Is(err, adapters.ErrAuth):
		return driver.Class{Code: ports.ErrAuth}
	case errors.Is(err, adapters.ErrTLS):
		return driver.Class{Code: ports.ErrTLS}
	case errors.Is(err, ports.ErrTooLarge):
		return driver.Class{Code: ports.ErrTooLarge}
	case errors.Is(err, ports.ErrUnconfirmed):
		return driver.Class{Code: ports.ErrUnconfirmed, Retryable: true}
	case errors.Is(err, errConnectTimeout), errors.As(err, &ne) && ne.Timeout():
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case errors.Is(err, autopaho.ConnectionDownError), errors.As(err, &ne):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	return driver.Class{}
}

// Close disconnects the sender and stops the embedded broker.
func (c *conn) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	var errs []error
	if err := c.pub.Disconnect(ctx); err != nil {
		errs = append(errs, fmt.Errorf("mqtt: disconnect sender: %w", err))
	}
	if c.broker != nil {
		errs = append(errs, c.broker.Close())
	}
	return errors.Join(errs...)
}
