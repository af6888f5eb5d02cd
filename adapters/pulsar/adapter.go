package pulsar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the Pulsar implementation of ports.Adapter: the portable
// layer (adapters/portable) over the Pulsar driver.
type Adapter struct {
	*portable.Adapter
	c *conn
}

// conn is the driver: one Pulsar client and the producers made on it.
type conn struct {
	o         Options // defaults applied
	client    pulsarclient.Client
	ownClient bool
	declared  kit.Declared // DeclareTopic's record: a topic's QoS routes its sends

	mu        sync.Mutex
	closed    bool
	producers map[string]*producer
	bg        sync.WaitGroup // CreateProducer and Subscribe calls that outlive their caller
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.Driver        = (*conn)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// New returns an adapter. Without Options.Client it creates a client for
// Options.URL, which connects lazily, on the first Send or Subscribe: New
// does no I/O (the URL opener checks the broker with a handshake). ctx is
// not used after New returns.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &conn{o: o, client: o.Client, producers: map[string]*producer{}}
	if c.client == nil {
		c.client, err = pulsarclient.NewClient(pulsarclient.ClientOptions{
			URL: o.URL, OperationTimeout: o.OperationTimeout, Logger: o.ClientLogger,
			Authentication: o.Authentication, TLSConfig: o.TLS,
		})
		if err != nil {
			return nil, fmt.Errorf("%w: pulsar client for %s: %w", ports.ErrInvalid, o.URL, err)
		}
		c.ownClient = true
	}
	return &Adapter{Adapter: portable.New(c, portable.Options{Logger: o.Logger, Secrets: o.Secrets}), c: c}, nil
}

// Capabilities are what Pulsar does through this adapter with the
// default options, as the capability matrix shows them; an open Adapter's
// Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return (&conn{}).Capabilities() }

// PhysicalTopic returns the persistent topic a logical topic maps to, or
// "" for an invalid or colliding topic.
func (a *Adapter) PhysicalTopic(t ports.Topic) string {
	name, err := a.c.physicalTopic(t)
	if err != nil {
		return ""
	}
	return name
}

func (c *conn) Name() string { return "pulsar" }

// Capabilities: Pulsar delays natively (DeliverAfter, double-checked
// against the not-before header), requeues natively with a count (a
// negative ack) but with the consumer's one nack delay, so the portable
// layer holds a requeue's delay; dead letters are confirmed copies.
//
// ExactRedeliveryCount is false: the broker keeps the count in memory per
// subscription; it is reset when the last consumer leaves, when the broker
// restarts and when the topic moves, so it is a lower bound.
func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       true,
		DelayedRequeue:       false,
		NativeDeadLetter:     false,
		Broadcast:            true,
		PerMessageAck:        true,
		PublisherConfirm:     true,
		DurableGroups:        true,
		ExactRedeliveryCount: false,
		Ordering:             ports.OrderNone,
		StartEarliest:        true,  // SubscriptionInitialPosition
		SingleActive:         false, // a Failover subscription keeps no redelivery count
		BestEffort:           true,  // non-persistent topics (subscription.go)
		Retention:            false, // namespace policy: admin API
		MaxLength:            false, // backlog quota: admin API
		MaxMessageBytes:      cmp.Or(c.o.MaxMessageBytes, MaxMessageBytes),
		SizeCountsEnvelope:   true,
		InstanceGuard:        ports.InstanceRefused, // an Exclusive probe (topology.go)
	}
}

// Classify maps the client's results onto the portable codes. A
// connection-level failure is retryable: the client reconnects on its own.
func (c *conn) Classify(err error) driver.Class {
	var pe *pulsarclient.Error
	if errors.As(err, &pe) {
		switch pe.Result() {
		case pulsarclient.TimeoutError:
			return driver.Class{Code: ports.ErrTimeout, Retryable: true}
		case pulsarclient.ConnectError, pulsarclient.NotConnectedError, pulsarclient.ReadError,
			pulsarclient.LookupError, pulsarclient.ServiceUnitNotReady, pulsarclient.TooManyLookupRequestException:
			return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
		case pulsarclient.AuthenticationError, pulsarclient.AuthorizationError, pulsarclient.ErrorGettingAuthenticationData:
			return driver.Class{Code: ports.ErrAuth}
		case pulsarclient.MessageTooBig:
			return driver.Class{Code: ports.ErrTooLarge}
		case pulsarclient.TopicNotFound, pulsarclient.SubscriptionNotFound:
			return driver.Class{Code: ports.ErrNotFound}
		case pulsarclient.ProducerClosed, pulsarclient.ConsumerClosed, pulsarclient.AlreadyClosedError:
			return driver.Class{Code: ports.ErrClosed}
		case pulsarclient.ProducerQueueIsFull, pulsarclient.ClientMemoryBufferIsFull:
			return driver.Class{Code: ports.ErrUnconfirmed, Retryable: true}
		}
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return driver.Class{Code: ports.ErrRefused, Retryable: true}
	case errors.As(err, &ne) && ne.Timeout():
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case errors.Is(err, ports.ErrClosed):
		return driver.Class{Code: ports.ErrClosed}
	case errors.Is(err, ports.ErrUnconfirmed): // a receipt that did not come, or no producer
		return driver.Class{Code: ports.ErrUnconfirmed, Retryable: true}
	}
	return driver.Class{}
}

// Close closes the producers (after their pending sends) and, when the
// adapter created it, the client. The portable layer stopped every
// subscription before.
func (c *conn) Close(context.Context) error {
	c.mu.Lock()
	c.closed = true
	producers := c.producers
	c.producers = map[string]*producer{}
	c.mu.Unlock()
	c.bg.Wait() // bounded by the client's operation timeout
	for _, p := range producers {
		<-p.ready
		if p.p != nil {
			p.p.Close()
		}
	}
	if c.ownClient {
		c.client.Close()
	}
	return nil
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
