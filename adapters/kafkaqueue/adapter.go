package kafkaqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// Adapter is the Kafka share-group ports.Adapter: the portable layer over
// a driver with one franz-go client (the idempotent acks=all producer and
// the admin requests) and one share-group member per subscription.
type Adapter struct {
	*portable.Adapter
	c *conn
}

// conn is the driver.
type conn struct {
	opts   Options
	cl     *kgo.Client
	topics sync.Map         // physical topics known to exist
	names  kafkawire.Topics // the physical topics (topic)
	pay    kafkawire.Payloads
	limit  int // group.share.delivery.count.limit
}

var (
	_ ports.Adapter        = (*Adapter)(nil)
	_ driver.GroupDeclarer = (*conn)(nil)
)

// New connects to opts.Brokers within ctx and checks that they serve share
// groups. A refused connection fails at once (ports.ErrRefused); refused
// credentials match ports.ErrAuth, a failed TLS handshake ports.ErrTLS.
func New(ctx context.Context, opts Options) (*Adapter, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	c := &conn{opts: opts}
	fail := func(what string, err error) (*Adapter, error) {
		if c.cl != nil {
			c.cl.Close()
		}
		return nil, &ports.BrokerError{Op: "connect", Code: c.Classify(err).Code, Err: fmt.Errorf("kafkaqueue: %s: %w", what, err)}
	}
	if err := adapters.Preflight(opts.Brokers, opts.TLS, 5*time.Second); err != nil {
		return fail("connect", err)
	}
	var err error
	if c.cl, err = kgo.NewClient(opts.clientOpts()...); err != nil {
		return nil, fmt.Errorf("%w: kafkaqueue: %w", ports.ErrInvalid, err)
	}
	versions, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, c.cl)
	if err == nil {
		err = kerr.ErrorForCode(versions.ErrorCode)
	}
	if err != nil && opts.SASL.User != "" && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && opts.answersWithoutSASL(ctx) {
		err = fmt.Errorf("%w: the broker closed the connection during SASL %s authentication of user %q; check the user name, the password and the mechanism", ports.ErrAuth, cmp.Or(opts.SASL.Mechanism, "plain"), opts.SASL.User)
	}
	if err != nil {
		return fail("connect", err)
	}
	need := map[int16]bool{76: true, 78: true, 79: true} // ShareGroupHeartbeat, ShareFetch, ShareAcknowledge
	for _, k := range versions.ApiKeys {
		delete(need, k.ApiKey)
	}
	if len(need) > 0 {
		return fail("connect", errors.New("the broker does not serve share groups (KIP-932: Kafka 4.x with share groups enabled)"))
	}
	if c.limit = opts.DeliveryLimit; c.limit == 0 {
		if c.limit, err = c.readDeliveryLimit(ctx); err != nil {
			return fail("reading group.share.delivery.count.limit (set Options.DeliveryLimit, delivery_limit in the URL, to the brokers' value instead)", err)
		}
	}
	var secrets []string
	if opts.SASL.Password != "" {
		secrets = []string{opts.SASL.Password}
	}
	return &Adapter{c: c, Adapter: portable.New(c, portable.Options{Logger: opts.Logger, Secrets: secrets})}, nil
}

// readDeliveryLimit asks a broker for its group.share.delivery.count.limit.
func (c *conn) readDeliveryLimit(ctx context.Context) (int, error) {
	meta, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, c.cl)
	if err != nil {
		return 0, err
	}
	if len(meta.Brokers) == 0 {
		return 0, errors.New("the metadata lists no broker")
	}
	id := meta.Brokers[0].NodeID
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeBroker, strconv.Itoa(int(id)), []string{deliveryLimitConfig}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, c.cl.Broker(int(id)))
	if err != nil {
		return 0, err
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return 0, err
		}
		for _, e := range r.Configs {
			if e.Name == deliveryLimitConfig && e.Value != nil {
				n, err := strconv.Atoi(*e.Value)
				if err != nil || n < 1 {
					return 0, fmt.Errorf("broker %d answered %s=%q", id, deliveryLimitConfig, *e.Value)
				}
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("broker %d did not answer %s", id, deliveryLimitConfig)
}

const deliveryLimitConfig = "group.share.delivery.count.limit"

// answersWithoutSASL reports whether the brokers answer a client that does
// not authenticate: then a connection closed during authentication means
// refused credentials (a broker closes it without an error response).
func (o Options) answersWithoutSASL(ctx context.Context) bool {
	o.SASL = SASL{}
	cl, err := kgo.NewClient(o.clientOpts()...)
	if err != nil {
		return false
	}
	defer cl.Close()
	_, err = kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	return err == nil
}

// Capabilities are what a Kafka share group does through this adapter with the
// default options, as the capability matrix shows them; an open Adapter's
// Capabilities method gives its own configuration's.
func Capabilities() ports.Capabilities { return (&conn{}).Capabilities() }

func (c *conn) Name() string { return "kafkaqueue" }

// Capabilities: per-record settlement shared out over any number of
// members, exact delivery counts, no order; the reasons are in
// docs/adapters/kafkaqueue.md.
func (c *conn) Capabilities() ports.Capabilities {
	return ports.Capabilities{
		Broadcast: true, PerMessageAck: true, PublisherConfirm: true, NativeBatch: true, DurableGroups: true,
		CompetingConsumers: true, ExactRedeliveryCount: true, Ordering: ports.OrderNone, StartEarliest: true,
		MaxMessageBytes: cmp.Or(c.opts.MaxMessageBytes, DefaultMaxMessageBytes), SizeCountsEnvelope: true,
		InstanceGuard: ports.InstanceRefused, DeliveryLimit: cmp.Or(c.limit, defaultDeliveryLimit),
	}
}

// defaultDeliveryLimit is Kafka's default group.share.delivery.count.limit,
// what Capabilities declares (New reads the brokers' value).
const defaultDeliveryLimit = 5

// topic is the Kafka topic of t: adopted, or kafkawire.Topic — the same
// name kafka:// uses, so both read each other's topics.
func (c *conn) topic(t ports.Topic) string {
	if e := c.opts.Existing; e != nil && e.Topics[t] != "" {
		return e.Topics[t]
	}
	return c.names.Topic(c.opts.Namespace, t)
}

// group is the share group of spec: adopted, or kafkawire.Group.
func (c *conn) group(spec ports.SubscriptionSpec) string {
	if e := c.opts.Existing; e != nil && spec.Mode != ports.Broadcast && e.Groups[spec.Group] != "" {
		return e.Groups[spec.Group]
	}
	return kafkawire.Group(c.opts.Namespace, spec)
}

// SendBatch publishes msgs (acks=all, idempotent) and returns when each
// is confirmed: the record is kafka://'s (kafkawire.Record), produced by
// kafkawire.Produce.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	return kit.SendPrepared(msgs, func(m *ports.Message) (*kgo.Record, error) {
		r, envelope := kafkawire.Record(c.topic(m.Topic), m, &c.pay, nil)
		err := m.CheckSize(c.opts.MaxMessageBytes, envelope)
		if err == nil {
			err = c.ensureTopic(ctx, r.Topic)
		}
		return r, err
	}, func(rs []*kgo.Record) []error { return kafkawire.Produce(ctx, c.cl, rs) })
}

// ensureTopic creates phys unless NoCreateTopics or Existing adopts it.
func (c *conn) ensureTopic(ctx context.Context, phys string) error {
	if _, ok := c.topics.Load(phys); ok || c.opts.NoCreateTopics || c.opts.Existing != nil && slices.Contains(slices.Collect(maps.Values(c.opts.Existing.Topics)), phys) {
		return nil
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = phys, c.opts.Partitions, c.opts.ReplicationFactor
	req.Topics, req.TimeoutMillis = append(req.Topics, t), 10000
	resp, err := req.RequestWith(ctx, c.cl)
	if err == nil && len(resp.Topics) > 0 {
		if err = kerr.ErrorForCode(resp.Topics[0].ErrorCode); errors.Is(err, kerr.TopicAlreadyExists) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("kafkaqueue: create topic %s: %w", phys, err)
	}
	c.topics.Store(phys, true)
	return nil
}

// Classify maps franz-go errors and the Kafka error codes
// (kafkawire.Class) to the portable codes; the network part is
// portable.ClassifyNet's (ErrTLS only on a TLS client).
func (c *conn) Classify(err error) driver.Class {
	var ke *kerr.Error
	switch {
	case errors.Is(err, kgo.ErrClientClosed):
		return driver.Class{Code: ports.ErrClosed}
	case errors.As(err, &ke):
		class, ok := kafkawire.Class(ke.Code)
		if errors.Is(err, ports.ErrUnconfirmed) && (!ok || class.Code == ports.ErrUnreachable) {
			return driver.Class{Code: ports.ErrUnconfirmed, Retryable: ke.Retriable} // the record may have been written
		}
		if ok {
			return class
		}
		return driver.Class{Retryable: ke.Retriable}
	case errors.Is(err, ports.ErrUnconfirmed):
		return driver.Class{Code: ports.ErrUnconfirmed, Retryable: true}
	}
	return portable.ClassifyNet(err, c.opts.TLS != nil)
}

// Close closes the client; the subscriptions were closed before.
func (c *conn) Close(context.Context) error {
	if c.cl != nil {
		c.cl.Close()
	}
	return nil
}
