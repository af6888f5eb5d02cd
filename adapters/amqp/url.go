package amqp

import (
	"context"
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
	return New(ctx, o)
}
