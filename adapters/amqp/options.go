package amqp

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit"
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

// Options configure an Adapter. Only URL is required; a zero field takes
// its default. docs/adapters/amqp.md explains each.
type Options struct {
	URL       string      // amqp:// or amqps:// (AMQP 0-9-1); required
	TLS       *tls.Config // for amqps; default: the system roots
	External  bool        // SASL EXTERNAL login: amqps, no credentials, a client certificate in TLS
	Namespace string      `default:"sluice"`                                 // prefixes every exchange and queue; letters, digits, '.', '-', '_'; default "sluice"
	QueueType QueueType   `url:"queue_type,quorum|classic" default:"quorum"` // of the subscription and delay queues; default Quorum
	// DropUnroutable: a Send no queue is bound for is confirmed and dropped,
	// not failed with ports.ErrNoSubscriber (dead letters always fail).
	DropUnroutable      bool          `url:"drop_unroutable"`
	MaxOutstanding      int           `url:"max_outstanding,1..1048576" default:"4096"`  // unconfirmed publishes per channel before Send waits; default 4096
	DialTimeout         time.Duration `url:"dial_timeout,10ms..1h" default:"10s"`        // one TCP connect and AMQP handshake; default 10s
	Heartbeat           time.Duration `url:"heartbeat,1s..1h" default:"10s"`             // default 10s
	ReconnectBackoff    time.Duration `url:"reconnect_backoff,1ms..1h" default:"100ms"`  // the first wait before consuming again after a loss; default 100ms
	ReconnectMaxBackoff time.Duration `url:"reconnect_max_backoff,1ms..1h" default:"5s"` // the doubling wait's bound; default 5s (at least ReconnectBackoff)
	OrphanExpiry        time.Duration `url:"orphan_expiry,1s..8760h" default:"10m"`      // x-expires of a Broadcast queue without InstanceTTL; default 10m
	DelayGranularity    float64       `url:"delay_granularity,0.001..1" default:"0.05"`  // relative step between delay queues, rounded up to; default 0.05
	DelaySlack          time.Duration `url:"delay_slack,0s..1m" default:"10ms"`          // added to every delay before rounding; default 10ms
	Existing            *Existing     // exchanges and queues adopted under their own names
	MaxMessageBytes     int           `default:"134217728"` // the largest payload (the broker's max_message_size); default 128 MiB
	Logger              *slog.Logger  // the capability line, subscription notes; default slog.Default()

	testHook func(*ports.Message, item) item // set by this package's tests
}

func (o Options) withDefaults() Options {
	kit.DefaultTags(&o)
	o.ReconnectMaxBackoff = max(o.ReconnectMaxBackoff, o.ReconnectBackoff)
	o.Logger, o.Existing = cmp.Or(o.Logger, slog.Default()), cmp.Or(o.Existing, &Existing{})
	return o
}

// validate reports the first problem with o (after defaults) as a
// *ports.ValueError.
func (o Options) validate() error {
	bad := kit.Invalid("amqp.Options.")
	const ext = "SASL EXTERNAL (mechanism=external) takes the identity from the client certificate: "
	u, err := url.Parse(o.URL)
	switch {
	case err != nil:
		return bad("URL", "must be an amqp:// or amqps:// URL (it does not parse)")
	case (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "":
		return bad("URL", fmt.Sprintf("must be an amqp:// or amqps:// URL with a host (got %q)", u.Redacted()))
	case ports.Topic(o.Namespace).Validate() != nil || len(o.Namespace) > 40:
		return bad("Namespace", "must be 1..40 letters, digits, '.', '-' or '_'")
	case o.External && u.Scheme != "amqps":
		return bad("External", ext+"it needs amqps://")
	case o.External && u.User != nil:
		return bad("External", ext+"give no user name or password in the URL")
	case o.External && (o.TLS == nil || len(o.TLS.Certificates) == 0 && o.TLS.GetClientCertificate == nil):
		return bad("External", "SASL EXTERNAL: mechanism=external needs a client certificate: give cert_file and key_file (or TLS.Certificates, adapters.WithTLSFiles)")
	case o.QueueType != Quorum && o.QueueType != Classic:
		return bad("QueueType", fmt.Sprintf("unknown queue type %q (quorum or classic)", string(o.QueueType)))
	case o.MaxMessageBytes > 512<<20:
		return bad("MaxMessageBytes", fmt.Sprintf("%d is above RabbitMQ's ceiling of 512 MiB for max_message_size", o.MaxMessageBytes))
	case o.DelayGranularity > 1:
		return bad("DelayGranularity", "must be within (0, 1]")
	}
	for t, x := range o.Existing.Topics {
		if t.Validate() != nil || x.Exchange == "" {
			return bad("Existing.Topics", fmt.Sprintf("%q → %q needs a valid topic and an exchange (the default exchange cannot be adopted)", string(t), x.Exchange))
		}
	}
	return kit.CheckExistingGroups("amqp.Options.Existing.Groups", o.Existing.Groups)
}

// amqp:// and amqps:// open the RabbitMQ adapter:
//
//	amqp://user:password@host:5672/vhost[?queue_type=quorum|classic&drop_unroutable=false&max_outstanding=…&dial_timeout=10s&heartbeat=10s&reconnect_backoff=100ms&reconnect_max_backoff=5s&orphan_expiry=10m&delay_granularity=0.05&delay_slack=10ms]
//	amqps://…   (TLS: the system roots, or WithTLS; ca_file, cert_file, key_file, server_name, insecure)
//	amqps://host:5671/?mechanism=external&cert_file=…&key_file=…   (SASL EXTERNAL: the certificate is the identity)
//
// The path is the virtual host; the shared namespace parameter prefixes
// the exchanges and queues. Open connects before it returns.
func init() {
	adapters.RegisterBroker(adapters.Broker{Scheme: "amqp", TLSScheme: "amqps", Open: openAMQP,
		Example: "amqp://guest:guest@127.0.0.1:5672/ or amqps://…@127.0.0.1:5671/",
		Check: func(host string) string {
			return "RabbitMQ listens at " + host + " (AMQP port, 5672 or 5671 for amqps), that it is reachable from here, and the credentials and virtual host"
		}})
}

func openAMQP(ctx context.Context, u *url.URL, cfg *adapters.Config, secure bool) (ports.Adapter, error) {
	target := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	if cfg.HasCredentials {
		target.User = url.UserPassword(cfg.Username, cfg.Password)
	}
	o := Options{URL: target.String(), Namespace: cfg.Namespace, Logger: cfg.Logger}
	if secure {
		o.TLS = cfg.TLS()
	}
	switch mech := strings.ToLower(cfg.Params.String("mechanism", "plain")); mech {
	case "plain":
	case "external": // Options.validate says what it needs
		o.External = true
	default:
		return nil, &adapters.ParamError{Param: "mechanism", Reason: fmt.Sprintf("%q is not plain or external", mech)}
	}
	if err := cfg.Params.Bind(&o, "mechanism"); err != nil {
		return nil, err
	}
	return New(ctx, o)
}
