package amqp

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// QueueType is the RabbitMQ queue type of the subscription queues.
type QueueType string

const (
	// Quorum queues (the default) are replicated and count deliveries
	// (x-delivery-count): Delivery.RedeliveryCount is exact.
	Quorum QueueType = "quorum"
	// Classic queues only flag a redelivery, so RedeliveryCount is a
	// lower bound (Capabilities.ExactRedeliveryCount false).
	Classic QueueType = "classic"
)

// Options configure an Adapter. Only URL is required; every other zero
// field takes the default named in its comment.
type Options struct {
	// URL is the broker's AMQP 0-9-1 URL, amqp:// or amqps://. Required.
	URL string
	// TLS configures amqps connections. Default: the system roots.
	TLS *tls.Config
	// External logs in with SASL EXTERNAL (the user is the client
	// certificate's): it needs an amqps URL without credentials and a
	// client certificate in TLS.
	External bool
	// Namespace prefixes every exchange and queue the adapter declares.
	// Letters, digits, '.', '-', '_'. Default "sluice".
	Namespace string
	// QueueType is the type of the subscription queues. Default Quorum.
	QueueType QueueType
	// DropUnroutable publishes Sends without the mandatory flag: RabbitMQ
	// confirms and drops a message no queue is bound for. Default false:
	// its Send fails with ports.ErrNoSubscriber. Requeues and dead
	// letters are always mandatory.
	DropUnroutable bool
	// PublishChannels is how many confirm channels Send spreads publishes
	// over. Default 1.
	PublishChannels int
	// MaxOutstanding bounds the unconfirmed publishes per publish channel;
	// Send waits (bounded by its ctx) at the bound. Default 4096.
	MaxOutstanding int
	// DialTimeout bounds one TCP connect plus AMQP handshake. Default 10s.
	DialTimeout time.Duration
	// Heartbeat is the AMQP heartbeat interval. Default 10s.
	Heartbeat time.Duration
	// ReconnectBackoff is the first wait before a subscription consumes
	// again after a loss (default 100ms); it doubles up to
	// ReconnectMaxBackoff (default 5s).
	ReconnectBackoff, ReconnectMaxBackoff time.Duration
	// OrphanExpiry is the x-expires of a Broadcast queue whose spec has no
	// InstanceTTL (it removes the queue of an instance that died).
	// Default 10 minutes.
	OrphanExpiry time.Duration
	// DelayGranularity is the relative step between delay queues: a delay
	// is rounded up to the next step, never early. Default 0.05.
	DelayGranularity float64
	// DelaySlack is added to every delay before rounding. Default 10ms.
	DelaySlack time.Duration
	// Existing adopts exchanges and queues that exist already under their
	// own names (see Existing). Default: none.
	Existing *Existing
	// MaxMessageBytes is the largest payload Send accepts (the broker's
	// max_message_size). Default 128 MiB.
	MaxMessageBytes int
	// Logger receives the capability line and subscription notes.
	// Default slog.Default().
	Logger *slog.Logger

	testHook func(*ports.Message, *item) // set by this package's tests
}

const maxMessageBytes = 128 << 20

func (o Options) withDefaults() Options {
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&o.DialTimeout, 10 * time.Second}, {&o.Heartbeat, 10 * time.Second}, {&o.ReconnectBackoff, 100 * time.Millisecond},
		{&o.OrphanExpiry, 10 * time.Minute}, {&o.DelaySlack, 10 * time.Millisecond}} {
		if *d.p <= 0 {
			*d.p = d.v
		}
	}
	if o.ReconnectMaxBackoff < o.ReconnectBackoff {
		o.ReconnectMaxBackoff = max(5*time.Second, o.ReconnectBackoff)
	}
	for _, d := range []struct {
		p *int
		v int
	}{{&o.PublishChannels, 1}, {&o.MaxOutstanding, 4096}, {&o.MaxMessageBytes, maxMessageBytes}} {
		if *d.p <= 0 {
			*d.p = d.v
		}
	}
	o.Namespace, o.QueueType = firstOf(o.Namespace, "sluice"), firstOf(o.QueueType, Quorum)
	if o.DelayGranularity <= 0 {
		o.DelayGranularity = 0.05
	}
	o.Logger = firstOf(o.Logger, slog.Default())
	return o
}

// firstOf returns a unless it is the zero value, else b.
func firstOf[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// validate reports the first problem with o (after defaults) as a
// *ports.ValueError.
func (o Options) validate() error {
	bad := func(field, reason string) error {
		return &ports.ValueError{Field: "amqp.Options." + field, Reason: reason}
	}
	const ext = "SASL EXTERNAL takes the identity from the client certificate: "
	u, err := url.Parse(o.URL)
	switch {
	case err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "":
		return bad("URL", fmt.Sprintf("must be an amqp:// or amqps:// URL with a host (got %q)", redact(o.URL)))
	case ports.Topic(o.Namespace).Validate() != nil || len(o.Namespace) > 40:
		return bad("Namespace", "must be 1..40 letters, digits, '.', '-' or '_'")
	case o.External && u.Scheme != "amqps":
		return bad("External", ext+"it needs amqps://")
	case o.External && u.User != nil:
		return bad("External", ext+"remove the user name and password from the URL")
	case o.External && (o.TLS == nil || len(o.TLS.Certificates) == 0 && o.TLS.GetClientCertificate == nil):
		return bad("External", "SASL EXTERNAL needs a client certificate (cert_file and key_file, or TLS.Certificates)")
	case o.QueueType != Quorum && o.QueueType != Classic:
		return bad("QueueType", fmt.Sprintf("unknown queue type %q (quorum or classic)", string(o.QueueType)))
	case o.MaxMessageBytes > 512<<20:
		return bad("MaxMessageBytes", fmt.Sprintf("%d is above RabbitMQ's ceiling of 512 MiB for max_message_size", o.MaxMessageBytes))
	case o.DelayGranularity > 1:
		return bad("DelayGranularity", "must be within (0, 1]")
	}
	return o.Existing.validate()
}
