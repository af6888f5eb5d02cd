package activemq

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the ActiveMQ Classic adapter: STOMP 1.2 over go-stomp, as the
// portable layer (adapters/portable) over the STOMP driver. It is safe for
// concurrent use.
type Adapter struct {
	*portable.Adapter
}

// conn is the driver: a process's connections to one broker (the publish
// connections, and one per subscription).
type conn struct {
	opts     Options
	slots    []pubSlot     // the publish connections
	next     atomic.Uint64 // round robin over slots
	declared kit.Declared  // DeclareTopic's record (retention and class at Send)
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.Driver        = (*conn)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// New connects to the broker (one publish connection, to fail fast with a
// clear error) and returns the adapter. A refused connection fails at once
// with ports.ErrRefused, refused credentials with ports.ErrAuth, a failed
// TLS handshake (Options.TLS) with ports.ErrTLS.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &conn{opts: opts, slots: make([]pubSlot, opts.PublishConns)}
	if _, err := c.slots[0].get(ctx, c); err != nil { // fail fast on a bad address
		if cl := c.Classify(err); cl.Code != nil {
			err = &ports.BrokerError{Op: "connect", Code: cl.Code, Retryable: cl.Retryable, Err: err}
		}
		return nil, err
	}
	backoff := kit.Backoff{Initial: opts.ReconnectBackoff, Max: opts.ReconnectMaxBackoff}
	return &Adapter{portable.New(c, portable.Options{Logger: opts.Logger, Secrets: []string{opts.Passcode}, Backoff: &backoff})}, nil
}

// Name returns "activemq". It works on the zero Adapter.
func (a *Adapter) Name() string { return (*conn)(nil).Name() }

// Capabilities declares what ActiveMQ does natively (see
// conn.Capabilities). It works on the zero Adapter, for the capability
// matrix.
func (a *Adapter) Capabilities() ports.Capabilities { return (*conn)(nil).Capabilities() }

// Name returns "activemq".
func (c *conn) Name() string { return "activemq" }

// Capabilities declares what ActiveMQ does natively through STOMP
// (docs/adapters/activemq.md has the reasons): delays are
// AMQ_SCHEDULED_DELAY (schedulerSupport="true"), on a Send and on a
// requeue copy; dead letters are the portable layer's confirmed copies
// (ActiveMQ's DLQ needs JMS redelivery counting); groups and instances are
// virtual-topic consumer queues; acks are ack:client-individual; a send
// is a transaction committed with a receipt; an idle instance's queue is
// not removed (no SubscriptionExpiry); a consumer lost says only
// redelivered=true (no exact count); a new group starts at its queue's
// creation; SingleActive is activemq.exclusive; BestEffort is
// persistent:false; Retention is each SEND's JMS expiration; MaxLength is
// broker policy; a Broadcast connection's client id is refused twice by
// the broker (InstanceGuard).
func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:   true,
		DelayedRequeue:   true,
		Broadcast:        true,
		PerMessageAck:    true,
		PublisherConfirm: true,
		DurableGroups:    true,
		Ordering:         ports.OrderNone,
		SingleActive:     true,
		BestEffort:       true,
		Retention:        true,
		MaxMessageBytes:  MaxMessageBytes,
		InstanceGuard:    ports.InstanceRefused,
	}
}

// Classify gives the driver's errors their portable codes. A lost
// connection, a refused or failed connect and a missing receipt may
// succeed on a new connection; a reconnect of a subscription is always
// retried (the broker may still hold the old connection's client id).
func (c *conn) Classify(err error) driver.Class {
	var (
		ne    net.Error
		again *reconnectError
	)
	retry := errors.As(err, &again)
	switch {
	case errors.Is(err, ports.ErrClosed):
		return driver.Class{Code: ports.ErrClosed}
	case errors.Is(err, adapters.ErrAuth):
		return driver.Class{Code: ports.ErrAuth, Retryable: retry}
	case errors.Is(err, adapters.ErrTLS) && c.opts.TLS != nil:
		return driver.Class{Code: ports.ErrTLS, Retryable: retry}
	case errors.Is(err, syscall.ECONNREFUSED):
		return driver.Class{Code: ports.ErrRefused, Retryable: true}
	case errors.Is(err, ports.ErrUnconfirmed):
		return driver.Class{Code: ports.ErrUnconfirmed, Retryable: true}
	case errors.As(err, &ne) && ne.Timeout():
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case errors.Is(err, errLost), errors.As(err, new(*net.OpError)), errors.As(err, new(*net.DNSError)):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	return driver.Class{Retryable: retry}
}

// Close closes the publish connections (the portable layer stopped the
// subscriptions before).
func (c *conn) Close(context.Context) error {
	for i := range c.slots {
		c.slots[i].drop(nil, true)
	}
	return nil
}
