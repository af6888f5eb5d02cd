package amqp

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// QueueType is the RabbitMQ queue type the adapter declares for
// subscriptions.
type QueueType string

const (
	// Quorum queues (the default) are replicated, durable, and count
	// deliveries themselves (x-delivery-count), which makes
	// Delivery.RedeliveryCount exact even when a consumer stops or crashes
	// without settling.
	Quorum QueueType = "quorum"
	// Classic queues are RabbitMQ's older queue type. The redelivery count
	// is exact for every requeue the adapter carries out, but a redelivery
	// after a consumer stopped or crashed is only known as a boolean, so
	// RedeliveryCount is a lower bound (Capabilities.ExactRedeliveryCount
	// is false).
	Classic QueueType = "classic"
)

// Options configure an Adapter. Only URL is required; every other zero
// field takes the default named in its comment.
type Options struct {
	// URL is the broker's AMQP 0-9-1 URL, amqp:// or amqps://. Required.
	URL string
	// TLS configures amqps connections. Default: none (the URL decides).
	TLS *tls.Config
	// External authenticates with SASL EXTERNAL: RabbitMQ takes the user
	// from the client certificate (the rabbitmq_auth_mechanism_ssl plugin,
	// ssl_cert_login_from). It needs an amqps URL without credentials and
	// a TLS configuration with a client certificate. Default false: PLAIN
	// with the URL's user name and password.
	External bool

	// Namespace prefixes every exchange and queue the adapter declares, so
	// several systems (or test runs) share one virtual host without
	// meeting. Letters, digits, '.', '-', '_'. Default "sluice".
	Namespace string
	// QueueType is the type of the subscription queues. Default Quorum.
	QueueType QueueType

	// DropUnroutable makes Send publish without the mandatory flag, so
	// that RabbitMQ confirms and drops a message no queue is bound for.
	// Default false: every Send is mandatory, and a message that reaches
	// no queue comes back as a basic.return and fails its Send with an
	// *UnconfirmedError (Unroutable) that is ports.ErrNoSubscriber, as on
	// mem — a Send that returned nil was stored in at least one queue.
	// Requeues and dead letters are always mandatory.
	DropUnroutable bool

	// PublishChannels is how many confirm-mode channels Send spreads
	// publishes over. Each carries any number of outstanding confirms.
	// Default 1 (DefaultPublishChannels).
	PublishChannels int
	// MaxOutstanding bounds the unconfirmed publishes per publish channel;
	// Send blocks (bounded by its ctx) when the bound is reached. Default
	// 4096.
	MaxOutstanding int

	// DialTimeout bounds one TCP connect plus AMQP handshake. Default 10s.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval. Default 10s.
	Heartbeat time.Duration
	// ReconnectBackoff is the first wait before a subscription retries a
	// lost connection; it doubles up to ReconnectMaxBackoff. Default 100ms.
	ReconnectBackoff time.Duration
	// ReconnectMaxBackoff caps the reconnect backoff. Default 5s.
	ReconnectMaxBackoff time.Duration

	// OrphanExpiry is the x-expires given to a Broadcast queue whose spec
	// has no InstanceTTL. Such a queue is deleted when its subscription
	// stops; OrphanExpiry only removes the queue of an instance that died
	// without stopping. Default 10 minutes.
	OrphanExpiry time.Duration

	// DelayGranularity is the relative step between the broker-side delay
	// queues that carry delayed messages and delayed requeues: a delay is
	// rounded up to the next step, so a message arrives no earlier than
	// asked and at most this fraction (plus DelaySlack and broker latency)
	// later. Smaller steps mean more delay queues. Default 0.05 (5%).
	DelayGranularity float64
	// DelaySlack is added to every delay before rounding, so that a
	// delayed message is not delivered before Delay has passed since Send
	// returned (the broker starts the clock when it enqueues, slightly
	// before it confirms). Default 10ms.
	DelaySlack time.Duration

	// Existing adopts exchanges and queues that exist already under their
	// own names (see Existing). Default: none; every name is derived from
	// Namespace.
	Existing *Existing
	// MaxMessageBytes is the largest payload Send accepts; a larger one
	// fails with a *ports.SizeError before anything is published. Set it to
	// the broker's max_message_size. RabbitMQ counts the message body
	// only, which is the payload: sluice's envelope travels in the AMQP
	// header table, whose frame must fit in the negotiated frame_max
	// (128 KiB by default). Default 128 MiB (DefaultMaxMessageBytes,
	// RabbitMQ 3.8–3.13's default; 4.0 lowered it to 16 MiB).
	MaxMessageBytes int

	// Logger receives the capability line at start and reconnect notes.
	// Default slog.Default().
	Logger *slog.Logger

	// faults is set by tests in this package only.
	faults *faults
}

// Defaults used when a field of Options is left zero.
const (
	DefaultNamespace           = "sluice"
	DefaultPublishChannels     = 1
	DefaultMaxOutstanding      = 4096
	DefaultDialTimeout         = 10 * time.Second
	DefaultHeartbeat           = 10 * time.Second
	DefaultReconnectBackoff    = 100 * time.Millisecond
	DefaultReconnectMaxBackoff = 5 * time.Second
	DefaultOrphanExpiry        = 10 * time.Minute
	DefaultDelayGranularity    = 0.05
	DefaultDelaySlack          = 10 * time.Millisecond
	DefaultMaxMessageBytes     = 128 << 20
)

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.QueueType == "" {
		o.QueueType = Quorum
	}
	if o.PublishChannels <= 0 {
		o.PublishChannels = DefaultPublishChannels
	}
	if o.MaxOutstanding <= 0 {
		o.MaxOutstanding = DefaultMaxOutstanding
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.ReconnectBackoff <= 0 {
		o.ReconnectBackoff = DefaultReconnectBackoff
	}
	if o.ReconnectMaxBackoff < o.ReconnectBackoff {
		o.ReconnectMaxBackoff = max(DefaultReconnectMaxBackoff, o.ReconnectBackoff)
	}
	if o.OrphanExpiry <= 0 {
		o.OrphanExpiry = DefaultOrphanExpiry
	}
	if o.DelayGranularity <= 0 {
		o.DelayGranularity = DefaultDelayGranularity
	}
	if o.DelaySlack <= 0 {
		o.DelaySlack = DefaultDelaySlack
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// validate reports the first problem with o (after defaults), wrapping
// ports.ErrInvalid.
func (o Options) validate() error {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return &ports.ValueError{Field: "amqp.Options.URL", Reason: fmt.Sprintf("must be an amqp:// or amqps:// URL with a host (got %q)", redact(o.URL))}
	}
	if err := ports.Topic(o.Namespace).Validate(); err != nil || len(o.Namespace) > 40 {
		return &ports.ValueError{Field: "amqp.Options.Namespace", Reason: "must be 1..40 letters, digits, '.', '-' or '_'"}
	}
	if o.External {
		switch {
		case u.Scheme != "amqps":
			return &ports.ValueError{Field: "amqp.Options.External", Reason: "SASL EXTERNAL takes the identity from the client certificate: it needs amqps://"}
		case u.User != nil:
			return &ports.ValueError{Field: "amqp.Options.External", Reason: "SASL EXTERNAL takes the identity from the client certificate: remove the user name and password from the URL"}
		case o.TLS == nil || len(o.TLS.Certificates) == 0 && o.TLS.GetClientCertificate == nil:
			return &ports.ValueError{Field: "amqp.Options.External", Reason: "SASL EXTERNAL needs a client certificate (cert_file and key_file, or TLS.Certificates)"}
		}
	}
	switch o.QueueType {
	case Quorum, Classic:
	default:
		return &ports.ValueError{Field: "amqp.Options.QueueType", Reason: fmt.Sprintf("unknown queue type %q (quorum or classic)", string(o.QueueType))}
	}
	if o.MaxMessageBytes > 512<<20 {
		return &ports.ValueError{Field: "amqp.Options.MaxMessageBytes", Reason: fmt.Sprintf("%d is above RabbitMQ's ceiling of 512 MiB for max_message_size", o.MaxMessageBytes)}
	}
	if err := o.Existing.validate(); err != nil {
		return err
	}
	if o.DelayGranularity > 1 {
		return &ports.ValueError{Field: "amqp.Options.DelayGranularity", Reason: "must be within (0, 1]"}
	}
	return nil
}
