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

// Adapter is the ActiveMQ Classic adapter (STOMP 1.2 over go-stomp): the
// portable layer over the STOMP driver. It is safe for concurrent use.
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

// New connects one publish connection (to fail fast: ports.ErrRefused,
// ports.ErrAuth, ports.ErrTLS with Options.TLS) and returns the adapter.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &conn{opts: opts, slots: make([]pubSlot, opts.PublishConns)}
	if _, err := c.slots[0].get(ctx, c); err != nil { // fail fast on a bad address
		return nil, driver.ConnectError(c, err)
	}
	backoff := kit.Backoff{Initial: opts.ReconnectBackoff, Max: opts.ReconnectMaxBackoff}
	return &Adapter{portable.New(c, portable.Options{Logger: opts.Logger, Secrets: []string{opts.Passcode}, Backoff: &backoff})}, nil
}

// Capabilities are what ActiveMQ does through this adapter with the
// default options, as the capability matrix shows them; an open Adapter's
// Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return (&conn{}).Capabilities() }

// Name returns "activemq".
func (c *conn) Name() string { return "activemq" }

// Capabilities declares what ActiveMQ does natively over STOMP (the
// reasons are in docs/adapters/activemq.md): AMQ_SCHEDULED_DELAY on sends
// and requeue copies, no native dead letter (it needs JMS redelivery
// counting), virtual-topic queues, ack:client-individual, transactions
// committed with a receipt, no queue expiry, no exact count after a lost
// consumer, activemq.exclusive, persistent:false, JMS expiration, and a
// client id per Broadcast instance.
func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:     true,
		DelayedRequeue:     true,
		Broadcast:          true,
		PerMessageAck:      true,
		CompetingConsumers: true, // a group is one queue; its consumers share it message by message
		PublisherConfirm:   true,
		DurableGroups:      true,
		Ordering:           ports.OrderNone,
		SingleActive:       true,
		BestEffort:         true,
		Retention:          true,
		MaxMessageBytes:    MaxMessageBytes,
		InstanceGuard:      ports.InstanceRefused,
	}
}

// Classify gives the driver's errors their portable codes; a failed
// reconnect is always retried (the broker may hold the old client id).
func (c *conn) Classify(err error) driver.Class {
	var ne net.Error
	retry := errors.Is(err, errReconnect)
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
