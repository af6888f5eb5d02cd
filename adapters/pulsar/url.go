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
// token_env=VAR, so that it is in no URL), or a user name and password
// (basic authentication; the password also from password_file or
// password_env), or — on pulsar+ssl:// with a client certificate
// (cert_file and key_file, or adapters.WithTLSFiles) and neither of the
// others — TLS authentication, the certificate being the identity. TLS on
// pulsar+ssl:// verifies the broker's certificate against the system roots
// or ca_file; insecure=true (or adapters.WithInsecureTLS) turns that off,
// with a warning.
//
// Open performs the binary protocol's CONNECT handshake with these
// credentials within connect_timeout (default 10s), so a broker that is
// unreachable, a TLS handshake that fails, and refused credentials each
// fail Open with an error that says which: a *ConnectError naming the
// address, an error matching adapters.ErrTLS, or an *AuthError matching
// adapters.ErrAuth.
func init() {
	adapters.Register("pulsar", adapters.OpenerFunc(openPulsar))
	adapters.Register("pulsar+ssl", adapters.OpenerFunc(openPulsar))
}

var pulsarParams = []string{"chunking", "send_timeout", "operation_timeout", "requeue_tick", "connect_timeout", "token (or token_file, token_env)"}

func openPulsar(ctx context.Context, u *url.URL, cfg *adapters.Config) (ports.Adapter, error) {
	secure := u.Scheme == "pulsar+ssl"
	if !secure {
		if err := cfg.PlainOnly("pulsar+ssl"); err != nil {
			return nil, err
		}
	}
	if u.Host == "" {
		return nil, &adapters.ParamError{Param: "host", Reason: u.Scheme + ":// needs a broker address, e.g. " + u.Scheme + "://127.0.0.1:6650"}
	}
	p := cfg.Params
	sendTimeout := p.Duration("send_timeout", DefaultSendTimeout, time.Millisecond, time.Hour)
	opTimeout := p.Duration("operation_timeout", DefaultOpTimeout, time.Millisecond, time.Hour)
	requeueTick := p.Duration("requeue_tick", DefaultRequeueTick, 3*time.Millisecond, time.Minute)
	token, hasToken := p.Secret("token")
	connectTimeout := p.Duration("connect_timeout", DefaultConnectTimeout, 10*time.Millisecond, time.Hour)
	chunking := p.Bool("chunking", false)
	if err := p.Err(pulsarParams...); err != nil {
		return nil, err
	}
	if hasToken && cfg.HasCredentials {
		return nil, &adapters.ParamError{Param: "token", Reason: "give a token or a user name and password, not both"}
	}

	opts := []Option{
		WithSendTimeout(sendTimeout),
		WithOperationTimeout(opTimeout),
		WithRequeueTick(requeueTick),
		WithClientLogger(pulsarlog.NewLoggerWithSlog(cfg.WarnLogger())),
	}
	switch path := strings.Trim(u.Path, "/"); {
	case path == "":
	case strings.Count(path, "/") == 1:
		tn := strings.SplitN(path, "/", 2)
		opts = append(opts, WithNamespace(tn[0], tn[1]))
	default:
		return nil, &adapters.ParamError{Param: "path", Reason: fmt.Sprintf("%q is not /tenant/namespace", u.Path)}
	}
	if chunking {
		opts = append(opts, WithChunking())
	}
	if cfg.Namespace != "" {
		opts = append(opts, WithTopicPrefix(cfg.Namespace+"."))
	}

	var tlsConf *tls.Config
	if secure {
		tlsConf = cfg.TLS()
		client := tlsConf.Clone()
		if client.ServerName == u.Hostname() {
			client.ServerName = "" // each broker of a cluster by its own name
		}
		opts = append(opts, WithTLSConfig(client))
	}
	switch {
	case hasToken:
		opts = append(opts, WithAuthentication(pulsarclient.NewAuthenticationToken(token)))
	case cfg.HasCredentials:
		auth, err := pulsarclient.NewAuthenticationBasic(cfg.Username, cfg.Password)
		if err != nil {
			return nil, &adapters.ParamError{Param: "credentials", Reason: "basic authentication: " + err.Error()}
		}
		opts = append(opts, WithAuthentication(auth))
	case secure && len(tlsConf.Certificates) > 0:
		cert := tlsConf.Certificates[0]
		opts = append(opts, WithAuthentication(pulsarclient.NewAuthenticationFromTLSCertSupplier(func() (*tls.Certificate, error) { return &cert, nil })))
	}
	a, err := New(append(opts, WithURL(u.Scheme+"://"+u.Host))...)
	if err != nil {
		return nil, err
	}
	// The Pulsar client connects lazily and, when refused, retries until
	// each operation's timeout, logging why: without this handshake an
	// unreachable broker, a failed TLS handshake or a refused token would
	// "open" and every Send and Subscribe would wait out its timeout.
	if err := a.handshake(ctx, defaultPort(u.Host, secure), connectTimeout); err != nil {
		_ = a.Close(context.Background())
		return nil, err
	}
	return a, nil
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

// ConnectError reports that the Pulsar broker at Addr did not accept a
// connection.
type ConnectError struct {
	Addr string
	Err  error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("pulsar: cannot connect to %s: %v; check that a Pulsar broker listens at that address (host and binary-protocol port, 6650 or 6651 for TLS) and that it is reachable from here", e.Addr, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }
