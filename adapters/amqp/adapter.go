// Package amqp is sluice's RabbitMQ adapter (AMQP 0-9-1, on
// github.com/rabbitmq/amqp091-go): a driver under the portable layer
// (adapters/portable). docs/adapters/amqp.md describes its topology,
// settlement, delays, failures and options.
//
//	a, err := amqp.New(ctx, amqp.Options{URL: "amqp://guest:guest@127.0.0.1:5672/"})
package amqp

import (
	"context"
	"errors"
	"net/url"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the RabbitMQ adapter, safe for concurrent use. Create it with
// New; release it with Close.
type Adapter struct{ *portable.Adapter }

// conn is the driver: a publish and a consume connection, so that broker
// flow control on publishers never holds back acks.
type conn struct {
	opts       Options
	topo       *topology
	pubC, subC *connector
	confirm    *kit.Lazy[*confirmChannel]
	listeners  sync.WaitGroup // of the confirm channels
	caps       ports.Capabilities
	declared   kit.Declared
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.TopicDeclarer = (*conn)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
	_ driver.RequeueCopier = (*sub)(nil)
	_ driver.AckFlusher    = (*sub)(nil)
	_ driver.Abandoner     = (*sub)(nil)
)

// New validates opts, connects and declares the adapter's exchanges; an
// unreachable broker (within opts.DialTimeout or ctx) fails with an error
// matching its portable code (ports.ErrRefused, ports.ErrAuth, …).
func New(ctx context.Context, opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &conn{opts: opts, topo: newTopology(opts), pubC: newConnector("publish", opts), subC: newConnector("consume", opts), caps: capabilities(opts)}
	c.confirm = kit.NewLazy(c.openConfirm, func(cc *confirmChannel) bool { return cc.Err() == nil })
	err := c.pubC.with(ctx, c.topo.declareExchanges)
	if err == nil {
		err = opts.Existing.check(ctx, c.pubC)
	}
	if err != nil {
		_ = c.pubC.close(context.Background())
		return nil, driver.ConnectError(c, err)
	}
	u, _ := url.Parse(opts.URL) // validated
	password, _ := u.User.Password()
	b := kit.Backoff{Initial: opts.ReconnectBackoff, Max: opts.ReconnectMaxBackoff, Multiplier: 2, Jitter: 0.5}
	return &Adapter{portable.New(c, portable.Options{Logger: opts.Logger, Secrets: []string{password}, Backoff: &b})}, nil
}

// Capabilities are what RabbitMQ does through this adapter with the
// default options, as the capability matrix shows them; an open Adapter's
// Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return capabilities(Options{}.withDefaults()) }

func (c *conn) Name() string                     { return "amqp" }
func (c *conn) Capabilities() ports.Capabilities { return c.caps }

func capabilities(o Options) ports.Capabilities {
	return ports.Capabilities{DelayedMessage: true, Broadcast: true, PerMessageAck: true, CompetingConsumers: true, PublisherConfirm: true,
		SubscriptionExpiry: true, DurableGroups: true, ExactRedeliveryCount: o.QueueType == Quorum, Ordering: ports.OrderNone, SingleActive: true,
		BestEffort: true, Retention: true, MaxLength: true, MaxMessageBytes: o.MaxMessageBytes, InstanceGuard: ports.InstanceRefused}
}

// Classify maps amqp091's and the dial's errors to portable codes; a lost
// connection or channel and a failed connect are retryable.
func (c *conn) Classify(err error) driver.Class {
	var ae *amqp.Error
	for _, code := range [...]error{ports.ErrNoSubscriber, ports.ErrUnconfirmed} {
		if errors.Is(err, code) {
			return driver.Class{Code: code}
		}
	}
	if cl := portable.ClassifyNet(err, c.pubC.tls != nil); cl.Code != nil {
		return cl
	}
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.NotFound:
			return driver.Class{Code: ports.ErrNotFound}
		case amqp.AccessRefused:
			return driver.Class{Code: ports.ErrAuth}
		case amqp.PreconditionFailed, amqp.NotAllowed:
			return driver.Class{}
		}
	}
	if ae != nil || errors.Is(err, amqp.ErrClosed) || errors.As(err, new(*kit.DialError)) { // another channel or connection error
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	return driver.Class{}
}

// Close closes both connections (failing what is unconfirmed).
func (c *conn) Close(ctx context.Context) error {
	err := errors.Join(c.subC.close(ctx), c.pubC.close(ctx))
	_ = c.confirm.Close(ctx, func(cc *confirmChannel) error { return cc.ch.Close() })
	c.listeners.Wait()
	return err
}
