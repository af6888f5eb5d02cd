package activemq

import (
	"context"
	"errors"
	"net"
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
	pub      *publisher
	declared kit.Declared // DeclareTopic's record (retention and class at Send)
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
	c := &conn{opts: opts}
	c.pub = newPublisher(c)
	if err := c.pub.warm(ctx); err != nil {
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

// Capabilities declares what ActiveMQ does natively through this adapter:
//
//   - DelayedMessage, DelayedRequeue: AMQ_SCHEDULED_DELAY (the broker's
//     scheduler, which must be enabled: schedulerSupport="true"), on a
//     Send and on the requeue copy the portable layer publishes.
//   - NativeDeadLetter: false — a dead letter is a copy the portable layer
//     sends, confirmed, to the "<topic>.dlq" queue before it acknowledges
//     the original (ActiveMQ's own DLQ is driven by JMS client redelivery
//     counting, which STOMP has not).
//   - Broadcast, DurableGroups: virtual-topic consumer queues.
//   - PerMessageAck: ack:client-individual.
//   - PublisherConfirm: every SendBatch is a transaction committed with a
//     receipt, persistent:true.
//   - SubscriptionExpiry: false — the broker removes only empty, inactive
//     queues (gcInactiveDestinations, a broker-wide setting) and STOMP
//     cannot delete a queue or give it a per-subscription TTL;
//     InstanceTTL is ignored.
//   - ExactRedeliveryCount: false — requeues carry an exact count, but a
//     message handed back by a lost consumer only says redelivered=true
//     (counted as one more).
//   - Ordering: none (requeued copies go to the back of the queue).
//   - StartEarliest: false — a group's queue holds only what arrived
//     after it was created.
//   - SingleActive: activemq.exclusive consumers (the broker fails over
//     to another consumer of the queue when the active one goes).
//   - BestEffort: persistent:false SENDs (memory only).
//   - Retention: the JMS expiration of every SEND (topology.go).
//   - MaxLength: false (broker policy, not reachable over STOMP).
//   - MaxMessageBytes: the adapter's 16 MiB bound on the payload.
//   - InstanceGuard: refused — a Broadcast subscription's connection
//     carries a client id the broker allows once (instance.go).
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
	c.pub.close()
	return nil
}
