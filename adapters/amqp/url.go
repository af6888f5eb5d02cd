package amqp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

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
	case "external": // Options.validate says what it needs
		o.External = true
	default:
		return nil, &adapters.ParamError{Param: "mechanism", Reason: fmt.Sprintf("%q is not plain or external", mech)}
	}
	if err := p.Bind(&o, "mechanism"); err != nil {
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
