package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the Kafka ports.Adapter: the portable layer over a driver with
// one sarama client, an idempotent acks=all franz-go producer and a
// consumer group per subscription.
type Adapter struct{ *portable.Adapter }

// conn is the driver.
type conn struct {
	opts     Options
	client   sarama.Client
	prod     *kgo.Client
	admin    sarama.ClusterAdmin
	declared kit.Declared
	topics   sync.Map         // physical topics known to exist
	names    kafkawire.Topics // the physical topics (topic)
	payloads kafkawire.Payloads
}

var (
	_ ports.Adapter         = (*Adapter)(nil)
	_ driver.TopicDeclarer  = (*conn)(nil)
	_ driver.GroupDeclarer  = (*conn)(nil)
	_ driver.Transactor     = (*conn)(nil)
	_ driver.AckFlusher     = (*sub)(nil)
	_ driver.Predecoder     = (*sub)(nil)
	_ driver.HeaderDeferrer = (*sub)(nil)
)

// New connects to opts.Brokers, within ctx. A refused connection fails at
// once (ports.ErrRefused); refused credentials match ports.ErrAuth, a
// failed TLS handshake ports.ErrTLS.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c, err := kit.Await(ctx, func() (*conn, error) { return connect(opts) }, func(c *conn, _ error) {
		if c != nil {
			_ = c.Close(context.Background())
		}
	})
	if err != nil {
		return nil, err
	}
	return &Adapter{portable.New(c, portable.Options{Logger: opts.Logger, Secrets: []string{opts.SASL.Password}})}, nil
}

func connect(opts Options) (*conn, error) {
	c := &conn{opts: opts}
	fail := func(what string, err error) (*conn, error) {
		_ = c.Close(context.Background())
		return nil, driver.ConnectError(c, fmt.Errorf("kafka: %s: %w", what, err))
	}
	if err := adapters.Preflight(opts.Brokers, opts.TLS, 5*time.Second); err != nil {
		return fail("connect", err)
	}
	var err error
	if c.client, err = sarama.NewClient(opts.Brokers, opts.config("client", 0)); err != nil {
		return fail("connect", opts.explainConnect(err))
	}
	if c.prod, err = kgo.NewClient(opts.franz()...); err != nil {
		return fail("producer", err)
	}
	if c.admin, err = sarama.NewClusterAdmin(opts.Brokers, opts.config("admin", 0)); err != nil {
		return fail("admin", opts.explainConnect(err))
	}
	if err := opts.Existing.check(c.admin); err != nil {
		return fail("Options.Existing", err)
	}
	return c, nil
}

// Capabilities are what Kafka does through this adapter with the
// default options, as the capability matrix shows them; an open Adapter's
// Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return (&conn{}).Capabilities() }

func (c *conn) Name() string { return "kafka" }

func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		Broadcast: true, PerMessageAck: true, PublisherConfirm: true, NativeBatch: true, DurableGroups: true,
		Ordering: ports.OrderNone, StartEarliest: true, SingleActive: true, Retention: true,
		MaxMessageBytes: cmp.Or(c.opts.MaxMessageBytes, DefaultMaxMessageBytes), SizeCountsEnvelope: true,
		InstanceGuard: ports.InstanceRefused, TransactionalSend: !c.opts.DisableIdempotence,
	}
}

// SendBatch publishes msgs with acks=all and returns when each is
// confirmed, else one error per message (kafkawire.Produce). A message
// record refuses is not sent.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	return kit.SendPrepared(msgs, func(m *ports.Message) (*kgo.Record, error) { return c.record(ctx, m, nil) },
		func(rs []*kgo.Record) []error { return kafkawire.Produce(ctx, c.prod, rs) })
}

// createTopic creates phys unless NoCreateTopics or Existing adopts it;
// exists reports a topic that was there already.
func (c *conn) createTopic(phys string, d *sarama.TopicDetail) (exists bool, err error) {
	if c.opts.NoCreateTopics || c.opts.Existing.adopted(phys) {
		return true, nil
	}
	d.NumPartitions, d.ReplicationFactor = c.opts.Partitions, c.opts.ReplicationFactor
	if err = c.admin.CreateTopic(phys, d, false); errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return true, nil
	} else if err != nil {
		return false, fmt.Errorf("kafka: create topic %s: %w", phys, err)
	}
	return false, nil
}

// ensureTopic creates phys and waits until the client's metadata has it.
func (c *conn) ensureTopic(ctx context.Context, phys string) error {
	if _, ok := c.topics.Load(phys); ok {
		return nil
	}
	if _, err := c.createTopic(phys, &sarama.TopicDetail{}); err != nil {
		return err
	}
	for {
		if c.client.RefreshMetadata(phys) == nil {
			if ps, err := c.client.Partitions(phys); err == nil && len(ps) > 0 {
				c.topics.Store(phys, true)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: topic %s not ready: %w", phys, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Classify maps the portable sentinels (portable.ClassifyNet), the
// clients' errors, then the Kafka error codes (kafkawire.Class) and the
// network's (portable.ClassifyNet).
func (c *conn) Classify(err error) driver.Class {
	var se *sessionError
	var code sarama.KError
	switch {
	case errors.As(err, &se): // the consume loop rejoins
		class := c.Classify(errors.Unwrap(se.error))
		class.Retryable = class.Code != ports.ErrAuth
		return class
	case errors.Is(err, ports.ErrInvalid) || errors.As(err, new(*adapters.PlaintextOnTLSError)) || (c.opts.TLS == nil && errors.Is(err, ports.ErrTLS)):
		return driver.Class{}
	case errors.Is(err, ports.ErrTLS) || errors.Is(err, ports.ErrAuth) || errors.Is(err, ports.ErrClosed):
		return portable.ClassifyNet(err, c.opts.TLS != nil)
	case errors.Is(err, ports.ErrUnconfirmed):
		return driver.Class{Code: ports.ErrUnconfirmed, Retryable: true}
	case errors.Is(err, sarama.ErrClosedClient) || errors.Is(err, sarama.ErrClosedConsumerGroup) || errors.Is(err, kgo.ErrClientClosed):
		return driver.Class{Code: ports.ErrClosed}
	case errors.As(err, &code):
		if class, ok := kafkawire.Class(int16(code)); ok {
			return class
		}
		return driver.Class{Retryable: true} // a retry or rejoin may clear a broker error code
	case errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotConnected):
		return driver.Class{Code: ports.ErrUnreachable, Retryable: true}
	}
	return portable.ClassifyNet(err, c.opts.TLS != nil)
}

// Close flushes the producer and closes the clients.
func (c *conn) Close(ctx context.Context) error {
	_, err := kit.Await(ctx, func() (struct{}, error) {
		var es []error
		if c.prod != nil { // what was handed over is sent first, within ctx
			es = append(es, c.prod.Flush(ctx))
			c.prod.Close()
		}
		if c.admin != nil {
			es = append(es, c.admin.Close())
		}
		if c.client != nil {
			es = append(es, c.client.Close())
		}
		return struct{}{}, errors.Join(es...)
	}, nil)
	return err
}
