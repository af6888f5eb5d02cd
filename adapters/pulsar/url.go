package pulsar

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// pulsar:// and pulsar+ssl:// open the Pulsar adapter:
//
//	pulsar://host:6650[/tenant/namespace][?send_timeout=30s&operation_timeout=30s&requeue_tick=100ms&connect_timeout=10s&chunking=true&token_file=/run/secrets/pulsar-token]
//	pulsar+ssl://host:6651/…[?ca_file=…&cert_file=…&key_file=…&server_name=…]
//
// The path selects the Pulsar tenant and namespace (default public/default);
// the shared namespace parameter becomes the topic prefix "<namespace>.".
//
// Authentication: a token (token=…, or better token_file=PATH or
// token_env=VAR), or a user name and password (basic authentication), or —
// on pulsar+ssl:// with a client certificate and neither of the others —
// TLS authentication, the certificate being the identity. Open performs
// the binary protocol's CONNECT with these credentials within
// connect_timeout (default 10s) and fails with a *ports.BrokerError naming
// the address: ErrRefused (at once), ErrTimeout, ErrUnreachable, ErrTLS or
// ErrAuth.
func init() {
	adapters.RegisterBroker(adapters.Broker{Scheme: "pulsar", TLSScheme: "pulsar+ssl", Open: openPulsar,
		Example: "pulsar://127.0.0.1:6650 or pulsar+ssl://127.0.0.1:6651"})
}

var pulsarParams = []string{"chunking", "send_timeout", "operation_timeout", "requeue_tick", "connect_timeout", "token (or token_file, token_env)"}

func openPulsar(ctx context.Context, u *url.URL, cfg *adapters.Config, secure bool) (ports.Adapter, error) {
	p := cfg.Params
	o := Options{
		URL:              u.Scheme + "://" + u.Host,
		SendTimeout:      p.Duration("send_timeout", DefaultSendTimeout, time.Millisecond, time.Hour),
		OperationTimeout: p.Duration("operation_timeout", DefaultOpTimeout, time.Millisecond, time.Hour),
		RequeueTick:      p.Duration("requeue_tick", DefaultRequeueTick, 3*time.Millisecond, time.Minute),
		Chunking:         p.Bool("chunking", false),
		Logger:           cfg.Logger,
		ClientLogger:     pulsarlog.NewLoggerWithSlog(cfg.WarnLogger()),
	}
	token, hasToken := p.Secret("token")
	connectTimeout := p.Duration("connect_timeout", DefaultConnectTimeout, 10*time.Millisecond, time.Hour)
	if err := p.Err(pulsarParams...); err != nil {
		return nil, err
	}
	if hasToken && cfg.HasCredentials {
		return nil, &adapters.ParamError{Param: "token", Reason: "give a token or a user name and password, not both"}
	}

	switch path := strings.Trim(u.Path, "/"); {
	case path == "":
	case strings.Count(path, "/") == 1:
		o.Tenant, o.Namespace, _ = strings.Cut(path, "/")
	default:
		return nil, &adapters.ParamError{Param: "path", Reason: fmt.Sprintf("%q is not /tenant/namespace", u.Path)}
	}
	if cfg.Namespace != "" {
		o.TopicPrefix = cfg.Namespace + "."
	}
	if secure {
		o.TLS = cfg.TLS().Clone()
		if o.TLS.ServerName == u.Hostname() {
			o.TLS.ServerName = "" // each broker of a cluster by its own name
		}
	}
	switch {
	case hasToken:
		o.Authentication, o.Secrets = pulsarclient.NewAuthenticationToken(token), []string{token}
	case cfg.HasCredentials:
		auth, err := pulsarclient.NewAuthenticationBasic(cfg.Username, cfg.Password)
		if err != nil {
			return nil, &adapters.ParamError{Param: "credentials", Reason: "basic authentication: " + err.Error()}
		}
		o.Authentication, o.Secrets = auth, []string{cfg.Password}
	case secure && len(o.TLS.Certificates) > 0:
		cert := o.TLS.Certificates[0]
		o.Authentication = pulsarclient.NewAuthenticationFromTLSCertSupplier(func() (*tls.Certificate, error) { return &cert, nil })
	}
	// The Pulsar client connects lazily and, when refused, retries until
	// each operation's timeout, logging why: without this handshake an
	// unreachable broker, a failed TLS handshake or a refused token would
	// "open" and every Send and Subscribe would wait out its timeout.
	if _, err := o.withDefaults(); err != nil {
		return nil, err
	}
	if err := checkBroker(ctx, o, defaultPort(u.Host, secure), connectTimeout); err != nil {
		return nil, err
	}
	return New(ctx, o)
}

// defaultPort adds Pulsar's default port when host has none.
func defaultPort(host string, secure bool) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if secure {
		return net.JoinHostPort(host, "6651")
	}
	return net.JoinHostPort(host, "6650")
}

// DefaultConnectTimeout bounds Open's check that the broker is reachable.
const DefaultConnectTimeout = 10 * time.Second
