package amqp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// amqp:// and amqps:// open the RabbitMQ adapter:
//
//	amqp://user:password@host:5672/vhost[?queue_type=quorum|classic&drop_unroutable=false&publish_channels=…&max_outstanding=…&dial_timeout=10s&heartbeat=10s&reconnect_backoff=100ms&reconnect_max_backoff=5s&orphan_expiry=10m&delay_granularity=0.05&delay_slack=10ms]
//	amqps://…   (TLS: the system roots, or WithTLS; ca_file, cert_file, key_file, server_name, insecure)
//	amqps://host:5671/?mechanism=external&cert_file=…&key_file=…   (SASL EXTERNAL: the certificate is the identity)
//
// The path is the virtual host; the shared namespace parameter prefixes
// the exchanges and queues. Open connects before it returns.
func init() {
	adapters.Register("amqp", adapters.OpenerFunc(openAMQP))
	adapters.Register("amqps", adapters.OpenerFunc(openAMQP))
}

var amqpParams = []string{"mechanism", "queue_type", "drop_unroutable", "publish_channels", "max_outstanding",
	"dial_timeout", "heartbeat", "reconnect_backoff", "reconnect_max_backoff", "orphan_expiry",
	"delay_granularity", "delay_slack"}

func openAMQP(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
	secure := u.Scheme == "amqps"
	if !secure {
		if err := cfg.PlainOnly("amqps"); err != nil {
			return nil, err
		}
	}
	if u.Host == "" {
		return nil, &adapters.ParamError{Param: "host", Reason: u.Scheme + ":// needs a broker address, e.g. " + u.Scheme + "://guest:guest@127.0.0.1:5672/"}
	}
	target := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	if cfg.HasCredentials {
		target.User = url.UserPassword(cfg.Username, cfg.Password)
	}
	o := Options{URL: target.String(), Namespace: cfg.Namespace, Logger: cfg.Logger}
	if secure {
		o.TLS = cfg.TLS()
	}

	p := cfg.Params
	switch mech := strings.ToLower(p.String("mechanism", "plain")); mech {
	case "plain":
	case "external":
		if !secure {
			return nil, &adapters.ParamError{Param: "mechanism", Reason: "external takes the identity from the client certificate: it needs amqps://"}
		}
		if cfg.HasCredentials {
			return nil, &adapters.ParamError{Param: "mechanism", Reason: "external takes the identity from the client certificate: give no user name or password"}
		}
		if !cfg.ClientCertificate() {
			return nil, &adapters.ParamError{Param: "mechanism", Reason: "external needs a client certificate: give cert_file and key_file (or adapters.WithTLSFiles)"}
		}
		o.External = true
	default:
		return nil, &adapters.ParamError{Param: "mechanism", Reason: fmt.Sprintf("%q is not plain or external", mech)}
	}
	switch qt := p.String("queue_type", string(Quorum)); QueueType(qt) {
	case Quorum, Classic:
		o.QueueType = QueueType(qt)
	default:
		return nil, &adapters.ParamError{Param: "queue_type", Reason: fmt.Sprintf("%q is not quorum or classic", qt)}
	}
	o.DropUnroutable = p.Bool("drop_unroutable", false)
	o.PublishChannels = p.Int("publish_channels", 0, 1, 64)
	o.MaxOutstanding = p.Int("max_outstanding", 0, 1, 1<<20)
	o.DialTimeout = p.Duration("dial_timeout", 0, 10*time.Millisecond, time.Hour)
	o.Heartbeat = p.Duration("heartbeat", 0, time.Second, time.Hour)
	o.ReconnectBackoff = p.Duration("reconnect_backoff", 0, time.Millisecond, time.Hour)
	o.ReconnectMaxBackoff = p.Duration("reconnect_max_backoff", 0, time.Millisecond, time.Hour)
	o.OrphanExpiry = p.Duration("orphan_expiry", 0, time.Second, 365*24*time.Hour)
	o.DelayGranularity = p.Float("delay_granularity", 0, 0.001, 1)
	o.DelaySlack = p.Duration("delay_slack", 0, 0, time.Minute)
	if err := p.Err(amqpParams...); err != nil {
		return nil, err
	}
	a, err := New(ctx, o)
	if err != nil {
		if errors.Is(err, ports.ErrInvalid) || errors.Is(err, adapters.ErrTLS) || errors.Is(err, adapters.ErrAuth) || ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w; check that RabbitMQ listens at %s (AMQP port, 5672 or 5671 for amqps), that it is reachable from here, and the credentials and virtual host", err, u.Host)
	}
	return a, nil
}
