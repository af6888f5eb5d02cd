package pulsar

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/sluicemq/sluice/ports"
)

// Defaults of the options.
const (
	DefaultURL         = "pulsar://127.0.0.1:6650"
	DefaultTenant      = "public"
	DefaultNamespace   = "default"
	DefaultSendTimeout = 30 * time.Second
	DefaultOpTimeout   = 30 * time.Second
	DefaultRequeueTick = 100 * time.Millisecond
)

// MaxMessageBytes is the largest message Send accepts by default: a stock
// Apache Pulsar broker's maxMessageSize (5 MiB, announced to the client as
// max_message_size) less 64 KiB kept for what the frame carries besides
// the payload and the properties (the fixed metadata fields, producer
// name, sequence id and frame headers). Options.MaxMessageBytes sets
// another bound for a broker configured otherwise.
const MaxMessageBytes = 5<<20 - 64<<10

// MaxChunkedMessageBytes is the largest message Send accepts with
// Options.Chunking (and no MaxMessageBytes): 64 MiB. The bound is the
// adapter's, not the broker's: every chunk is a broker message under
// max_message_size, but a consumer holds a whole message in memory while
// it reassembles it (and up to 100 incomplete ones), so the adapter keeps
// a message to a size a consumer can be expected to buffer.
const MaxChunkedMessageBytes = 64 << 20

// Options configure New. The zero value connects to DefaultURL. New fails
// with an error wrapping ports.ErrInvalid naming a bad field.
type Options struct {
	// URL is the service URL of the client the adapter creates
	// ("pulsar+ssl://host:6651" for TLS). Default DefaultURL.
	URL string
	// Client, if set, is used instead of a client the adapter creates;
	// the caller owns it (Close does not close it).
	Client pulsarclient.Client
	// Tenant and Namespace place the physical topics (they must exist).
	// Default "public"/"default".
	Tenant, Namespace string
	// TopicPrefix is prepended to every physical topic name.
	TopicPrefix string
	// SendTimeout bounds the wait for a publish receipt. Default
	// DefaultSendTimeout. A timed-out send may still have been stored.
	SendTimeout time.Duration
	// OperationTimeout bounds the created client's operations
	// (subscribing, acknowledging). Default DefaultOpTimeout.
	OperationTimeout time.Duration
	// RequeueTick is the consumers' negative-ack redelivery delay
	// (ConsumerOptions.NackRedeliveryDelay): a requeued message comes back
	// between RequeueTick and about 4/3 of it after its Disposition.Delay,
	// which the portable layer holds. At least 3ms. Default
	// DefaultRequeueTick; a smaller tick wakes the client more often.
	RequeueTick time.Duration
	// MaxMessageBytes is the largest message Send accepts: payload, key
	// and properties. Default MaxMessageBytes, or MaxChunkedMessageBytes
	// with Chunking.
	MaxMessageBytes int
	// Chunking splits a message larger than the broker's max_message_size
	// into chunks (ProducerOptions.EnableChunking), which the consumer
	// reassembles. Hazard: the broker may dispatch the chunks of one
	// message to different consumers of a Shared subscription, and none
	// can reassemble it: it is stranded until a consumer stops. Use it
	// where each subscription has one consumer (Broadcast, or a
	// LoadBalance group run by one instance).
	Chunking bool
	// Existing adopts Pulsar names other programs already use (see
	// Existing). Nothing is created or redeclared.
	Existing []Existing
	// Authentication of the created client (pulsarclient.
	// NewAuthenticationToken, …). Default none. New does no I/O: a refused
	// credential shows on the first Send or Subscribe.
	Authentication pulsarclient.Authentication
	// TLS configures the created client for pulsar+ssl://; an empty
	// ServerName means each broker connection's own host.
	TLS *tls.Config
	// Logger receives the capability line and the portable layer's
	// notes. Default slog.Default().
	Logger *slog.Logger
	// ClientLogger is the created client's logger. Default: discard.
	ClientLogger pulsarlog.Logger
	// Secrets are removed from the text of every error.
	Secrets []string
}

// Existing is one adopted topic: logical topic Topic is the Pulsar topic
// Physical (a full name, "persistent://tenant/namespace/topic"), and a
// LoadBalance group listed in Subscriptions (logical group → existing
// subscription name) consumes through that subscription, so a service
// moving to sluice keeps every name and resumes the existing cursors. The
// dead-letter topic "<Topic>.dlq" stays derived.
type Existing struct {
	Topic         ports.Topic
	Physical      string
	Subscriptions map[string]string
}

// withDefaults validates o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	bad := func(field, reason string) (Options, error) {
		return o, &ports.ValueError{Field: "pulsar.Options." + field, Reason: reason}
	}
	if o.URL == "" {
		o.URL = DefaultURL
	}
	if p, err := url.Parse(o.URL); err != nil || (p.Scheme != "pulsar" && p.Scheme != "pulsar+ssl") || p.Host == "" {
		return bad("URL", fmt.Sprintf("%q is not a pulsar:// or pulsar+ssl:// URL", o.URL))
	}
	o.Tenant, o.Namespace = cmp.Or(o.Tenant, DefaultTenant), cmp.Or(o.Namespace, DefaultNamespace)
	if !validName(o.Tenant) || !validName(o.Namespace) {
		return bad("Namespace", fmt.Sprintf("%q/%q: tenant and namespace must be letters, digits, '.', '-', '_'", o.Tenant, o.Namespace))
	}
	if o.TopicPrefix != "" && !validName(o.TopicPrefix) {
		return bad("TopicPrefix", fmt.Sprintf("%q: only letters, digits, '.', '-', '_'", o.TopicPrefix))
	}
	switch {
	case o.SendTimeout < 0 || o.OperationTimeout < 0 || o.MaxMessageBytes < 0:
		return bad("SendTimeout", "timeouts and MaxMessageBytes must not be negative")
	case o.RequeueTick != 0 && o.RequeueTick < 3*time.Millisecond:
		return bad("RequeueTick", "must be at least 3ms")
	}
	o.SendTimeout = cmp.Or(o.SendTimeout, DefaultSendTimeout)
	o.OperationTimeout = cmp.Or(o.OperationTimeout, DefaultOpTimeout)
	o.RequeueTick = cmp.Or(o.RequeueTick, DefaultRequeueTick)
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = MaxMessageBytes
		if o.Chunking {
			o.MaxMessageBytes = MaxChunkedMessageBytes
		}
	}
	if o.ClientLogger == nil {
		o.ClientLogger = pulsarlog.DefaultNopLogger()
	}
	if o.TLS != nil {
		o.TLS = o.TLS.Clone()
	}
	seen := map[ports.Topic]bool{}
	for _, e := range o.Existing {
		rest, ok := strings.CutPrefix(e.Physical, "persistent://")
		switch parts := strings.Split(rest, "/"); {
		case e.Topic.Validate() != nil:
			return bad("Existing", e.Topic.Validate().Error())
		case !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "":
			return bad("Existing", fmt.Sprintf("%q is not a full persistent topic name, persistent://tenant/namespace/topic", e.Physical))
		case seen[e.Topic]:
			return bad("Existing", fmt.Sprintf("%q is adopted twice", e.Topic))
		}
		seen[e.Topic] = true
		for _, other := range o.Existing {
			if other.Topic != e.Topic && other.Physical == e.Physical {
				return bad("Existing", fmt.Sprintf("%q is the topic of both %q and %q", e.Physical, e.Topic, other.Topic))
			}
		}
		for g, s := range e.Subscriptions {
			if g == "" || s == "" {
				return bad("Existing", "a subscription mapping has an empty group or name")
			}
		}
	}
	return o, nil
}

// validName reports whether s is a usable tenant, namespace or prefix.
func validName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_')
	})
}
