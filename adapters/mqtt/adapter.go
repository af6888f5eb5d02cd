package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
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

// conn is the driver: the sender's connection (subscriptions have their own).
type conn struct {
	opts        Options          // URL: the embedded broker's with Embedded
	broker      *embedded.Broker // when Options.Embedded
	pub         *autopaho.ConnectionManager
	declared    kit.Declared  // DeclareTopic's record (retention and class at Send)
	instanceSet bool          // Options.Instance was given (DeclareGroup needs it)
	maxPacket   atomic.Uint32 // the sender's CONNACK Maximum Packet Size (0: none announced)
	senderSeen  chan struct{} // closed once senderUp read the sender's first CONNACK
	seenOnce    sync.Once

	publishFault func(topic string) error  // tests: fails publishes before they are written
	arrived      func(id string, dup bool) // tests: sees every PUBLISH a subscription receives

	mu     sync.Mutex
	closed bool
	subs   map[string]*subscription // live subscriptions by client id
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.Driver        = (*conn)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// New returns once the sender is connected (Embedded: on a broker it
// starts). It fails at once with ports.ErrRefused, ErrAuth or (mqtts://
// only) ErrTLS, otherwise after Options.ConnectTimeout.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	instanceSet := opts.Instance != ""
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &conn{opts: opts, instanceSet: instanceSet, subs: map[string]*subscription{}, senderSeen: make(chan struct{})}
	if opts.Embedded {
		b, err := embedded.Start(embedded.Options{})
		if err != nil {
			return nil, err
		}
		c.broker, c.opts.URL = b, b.URL()
	}
	pub, err := c.connect(ctx, opts.Namespace+":pub:"+opts.Instance+":"+ports.NewID(), nil)
	if err != nil {
		if c.broker != nil {
			_ = c.broker.Close()
		}
		return nil, err
	}
	c.pub = pub
	select { // autopaho says the connection is up before it hands senderUp the CONNACK: the broker's limit is known after
	case <-c.senderSeen:
	case <-ctx.Done():
		_ = c.Close(context.Background())
		return nil, ctx.Err()
	}
	return &Adapter{Adapter: portable.New(c, portable.Options{Logger: opts.Logger, Secrets: []string{opts.Password}}), c: c}, nil
}

// Capabilities are those of the default options (the capability matrix's);
// an open Adapter's Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return (&conn{}).Capabilities() }

// Name is "mqtt".
func (c *conn) Name() string { return "mqtt" }

// Capabilities declares what MQTT 5 gives natively; each is explained in
// docs/adapters/mqtt.md. Delays, dead letters and per-message acks are not.
func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{Broadcast: true, PublisherConfirm: true, SubscriptionExpiry: true, DurableGroups: true,
		Ordering: ports.OrderNone, BestEffort: true, Retention: true, MaxMessageBytes: c.maxMessageBytes(),
		SizeCountsEnvelope: true, InstanceGuard: ports.InstanceDetected}
}

// maxMessageBytes is MaxPacketBytes or the broker's smaller limit.
func (c *conn) maxMessageBytes() int {
	if c != nil {
		if n := c.maxPacket.Load(); n > 0 && n < MaxPacketBytes {
			return int(n)
		}
	}
	return MaxPacketBytes
}

// SendBatch publishes msgs concurrently on the sender connection.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	return kit.SendEach(ctx, msgs, c.send)
}

func (c *conn) send(ctx context.Context, m *ports.Message) error {
	p := toPublish(c.physical(m.Topic), m)
	_, deadLetter := m.Topic.DeadLetterOf()
	if c.declared.QoS(m) == ports.BestEffort {
		p.QoS = 0
	}
	if r := c.declared.Retention(m.Topic); r > 0 {
		p.Properties.MessageExpiry = new(seconds(r))
	}
	if err := m.CheckSize(c.maxMessageBytes(), envelopeBytes(p)); err != nil {
		return err
	}
	if c.publishFault != nil {
		if err := c.publishFault(p.Topic); err != nil {
			return fmt.Errorf("%w: %v", ports.ErrUnconfirmed, err)
		}
	}
	for {
		resp, err := c.pub.Publish(ctx, p)
		switch {
		case err == nil && resp != nil && resp.ReasonCode == noMatchingSubscribers && (!c.opts.DropUnroutable || deadLetter):
			return fmt.Errorf("%w: PUBACK reason code 0x10, the broker dropped it (%w)", ports.ErrNoSubscriber, ports.ErrUnconfirmed)
		case err == nil:
			return nil
		case errors.Is(err, autopaho.ConnectionDownError):
			// Not yet written: wait for the connection (bounded by ctx).
			if err = c.pub.AwaitConnection(ctx); err == nil {
				continue
			}
		case resp != nil && resp.ReasonCode >= 0x80:
			err = fmt.Errorf("PUBACK reason code 0x%02x %s", resp.ReasonCode, resp.Properties.ReasonString)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %v", ports.ErrUnconfirmed, err)
	}
}

// Classify maps the adapter's errors to portable codes (ErrTLS only on
// mqtts://, see explainConnect).
func (c *conn) Classify(err error) driver.Class {
	switch {
	case errors.Is(err, ports.ErrNoSubscriber):
		return driver.Class{Code: ports.ErrNoSubscriber}
	case errors.Is(err, ports.ErrUnconfirmed):
		return driver.Class{Code: ports.ErrUnconfirmed, Retryable: true}
	case errors.Is(err, errConnectTimeout):
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case errors.Is(err, autopaho.ConnectionDownError):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	return portable.ClassifyNet(err, c.opts.TLS != nil)
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

// senderUp records the broker's Maximum Packet Size.
func (c *conn) senderUp(_ *autopaho.ConnectionManager, ca *paho.Connack) {
	if ca.Properties != nil && ca.Properties.MaximumPacketSize != nil {
		c.maxPacket.Store(*ca.Properties.MaximumPacketSize)
	}
	c.seenOnce.Do(func() { close(c.senderSeen) })
}
