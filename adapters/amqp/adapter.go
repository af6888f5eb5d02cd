package amqp

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the RabbitMQ adapter: the portable layer (adapters/portable)
// over the AMQP 0-9-1 driver. It is safe for concurrent use. Create it
// with New; release it with Close.
type Adapter struct {
	*portable.Adapter
	c *conn
}

// conn is the driver: a publish connection and a consume connection, so
// that broker flow control on publishers never holds back acks.
type conn struct {
	opts       Options
	topo       *topology
	pubC, subC *connector
	pub        *publisher
	caps       ports.Capabilities
	faults     *faults
	existing   *Existing
	declared   kit.Declared
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.Driver        = (*conn)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// faults lets this package's tests make the broker refuse publishes: they
// go to faultKey, a routing key nothing is bound to.
type faults struct{ sends, deadLetters atomic.Bool }

const faultKey = "~sluice-fault-unroutable"

// New validates opts, connects to the broker and declares the adapter's
// exchanges. It fails when the broker cannot be reached within
// opts.DialTimeout (or ctx), with an error matching its portable code
// (ports.ErrRefused, ports.ErrAuth, ports.ErrTLS, …).
func New(ctx context.Context, opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &conn{opts: opts, topo: newTopology(opts), pubC: newConnector("publish", opts), subC: newConnector("consume", opts),
		faults: opts.faults, existing: opts.Existing, caps: capabilities(opts.QueueType)}
	if c.faults == nil {
		c.faults = &faults{}
	}
	c.caps.MaxMessageBytes = opts.MaxMessageBytes
	c.pub = &publisher{conn: c.pubC, topo: c.topo, max: opts.MaxOutstanding, slots: make([]pubSlot, opts.PublishChannels)}
	ch, err := c.pubC.channel(ctx)
	if err == nil {
		err = c.topo.declareExchanges(ch)
		ch.Close()
	}
	if err == nil {
		err = opts.Existing.check(ctx, c.pubC.channel)
	}
	if err != nil {
		c.pubC.close(context.Background())
		if cl := c.Classify(err); cl.Code != nil {
			err = &ports.BrokerError{Op: "connect", Code: cl.Code, Retryable: cl.Retryable, Err: err}
		}
		return nil, err
	}
	var secrets []string
	if u, err := url.Parse(opts.URL); err == nil && u.User != nil {
		p, _ := u.User.Password()
		secrets = append(secrets, p)
	}
	b := kit.Backoff{Initial: opts.ReconnectBackoff, Max: opts.ReconnectMaxBackoff, Multiplier: 2, Jitter: 0.5}
	return &Adapter{c: c, Adapter: portable.New(c, portable.Options{Logger: opts.Logger, Secrets: secrets, Backoff: &b})}, nil
}

// Name returns "amqp". It works on the zero Adapter.
func (a *Adapter) Name() string { return "amqp" }

// Capabilities declares what RabbitMQ does through this adapter (see
// docs/adapters/amqp.md): delays through delay queues, broadcast,
// per-message ack, confirms, expiry, durable and single-active groups,
// best effort, retention and length, an exact redelivery count on quorum
// queues; dead letters are confirmed copies to "<topic>.dlq", and a new
// group cannot start at the earliest message. The zero Adapter reports
// the defaults' (quorum queues), for capability tables.
func (a *Adapter) Capabilities() ports.Capabilities {
	if a.c == nil {
		return capabilities(Quorum)
	}
	return a.c.caps
}

// Name returns "amqp".
func (c *conn) Name() string { return "amqp" }

// Capabilities are those of the adapter's queue type.
func (c *conn) Capabilities() ports.Capabilities { return c.caps }

// capabilities are the adapter's capabilities with queues of type qt.
func capabilities(qt QueueType) ports.Capabilities {
	return ports.Capabilities{
		DelayedMessage:       true,
		DelayedRequeue:       true,
		Broadcast:            true,
		PerMessageAck:        true,
		PublisherConfirm:     true,
		SubscriptionExpiry:   true,
		DurableGroups:        true,
		ExactRedeliveryCount: qt == Quorum,
		Ordering:             ports.OrderNone,
		SingleActive:         true,
		BestEffort:           true,
		Retention:            true,
		MaxLength:            true,
		MaxMessageBytes:      DefaultMaxMessageBytes,
		InstanceGuard:        ports.InstanceRefused,
	}
}

// Classify maps amqp091's and the dial's errors to portable codes. A lost
// connection or channel, a cancelled consumer and a refused or timed-out
// connect are retryable: the driver dials again on its next call.
func (c *conn) Classify(err error) driver.Class {
	var ae *amqp.Error
	var ne net.Error
	var lost *lostError
	switch {
	case errors.Is(err, ports.ErrClosed):
		return driver.Class{Code: ports.ErrClosed}
	case errors.Is(err, ports.ErrNoSubscriber):
		return driver.Class{Code: ports.ErrNoSubscriber}
	case errors.Is(err, ports.ErrUnconfirmed):
		return driver.Class{Code: ports.ErrUnconfirmed}
	case errors.As(err, &lost):
		return driver.Class{Code: lost.code, Retryable: true}
	case errors.Is(err, adapters.ErrTLS) && c.pubC.secure:
		return driver.Class{Code: ports.ErrTLS}
	case errors.Is(err, adapters.ErrAuth):
		return driver.Class{Code: ports.ErrAuth}
	case errors.Is(err, syscall.ECONNREFUSED):
		return driver.Class{Code: ports.ErrRefused, Retryable: true}
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return driver.Class{Code: ports.ErrTimeout, Retryable: true}
	case errors.As(err, &ae):
		switch ae.Code {
		case amqp.NotFound:
			return driver.Class{Code: ports.ErrNotFound}
		case amqp.AccessRefused:
			return driver.Class{Code: ports.ErrAuth}
		case amqp.PreconditionFailed, amqp.NotAllowed:
			return driver.Class{}
		}
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	case errors.Is(err, amqp.ErrClosed) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNRESET):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	var de *kit.DialError
	if errors.As(err, &de) {
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	return driver.Class{}
}

// lostError is a consumer's loss (channel or connection closed, or
// cancelled by the broker); the next receive consumes again.
type lostError struct {
	err  error
	code error
}

func (e *lostError) Error() string { return e.err.Error() }
func (e *lostError) Unwrap() error { return e.err }

// Close closes both connections (failing what is unconfirmed).
func (c *conn) Close(ctx context.Context) error {
	err := errors.Join(c.subC.close(ctx), c.pubC.close(ctx))
	c.pub.close()
	return err
}

// isClosedErr reports amqp091's "already closed" error.
func isClosedErr(err error) bool { return errors.Is(err, amqp.ErrClosed) }

// redact hides a password in a URL for error messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			return "…" + raw[i:]
		}
		return raw
	}
	return u.Redacted()
}
