package pulsar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/ports"
)

// pulsar:// and pulsar+ssl:// open the Pulsar adapter:
//
//	pulsar://host:6650[/tenant/namespace][?send_timeout=30s&operation_timeout=30s&requeue_tick=100ms&connect_timeout=10s&token=…]
//	pulsar+ssl://host:6651/…   (TLS: the system roots, or WithTLS)
//
// The path selects the Pulsar tenant and namespace (default public/default);
// the shared namespace parameter becomes the topic prefix "<namespace>.".
// A token parameter, or a user name and password (basic authentication),
// authenticate the client; the adapter then runs on a client this opener
// creates and closes. Open checks that the broker's address accepts a
// connection within connect_timeout (default 10s) and fails with a
// *ConnectError naming it otherwise.
func init() {
	adapters.Register("pulsar", adapters.OpenerFunc(openPulsar))
	adapters.Register("pulsar+ssl", adapters.OpenerFunc(openPulsar))
}

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
	token := p.String("token", "")
	connectTimeout := p.Duration("connect_timeout", DefaultConnectTimeout, 10*time.Millisecond, time.Hour)
	if err := p.Err("send_timeout", "operation_timeout", "requeue_tick", "token", "connect_timeout"); err != nil {
		return nil, err
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
	if cfg.Namespace != "" {
		opts = append(opts, WithTopicPrefix(cfg.Namespace+"."))
	}

	if token != "" && cfg.HasCredentials {
		return nil, &adapters.ParamError{Param: "token", Reason: "give a token or a user name and password, not both"}
	}

	service := u.Scheme + "://" + u.Host
	// The Pulsar client connects lazily: without this check an unreachable
	// broker "opens" and every Send and Subscribe then waits out its
	// timeout. Open fails instead, naming the address.
	reachable := func(a ports.Adapter) (ports.Adapter, error) {
		if err := probe(ctx, u.Host, connectTimeout); err != nil {
			_ = a.Close(context.Background())
			return nil, err
		}
		return a, nil
	}
	if token == "" && !cfg.HasCredentials && !cfg.CustomTLS() {
		a, err := New(append(opts, WithURL(service))...)
		if err != nil {
			return nil, err
		}
		return reachable(a)
	}
	if token != "" && cfg.HasCredentials {
		return nil, &adapters.ParamError{Param: "token", Reason: "give a token or a user name and password, not both"}
	}
	co := pulsarclient.ClientOptions{
		URL:              service,
		OperationTimeout: opTimeout,
		Logger:           pulsarlog.NewLoggerWithSlog(cfg.WarnLogger()),
	}
	if token != "" {
		co.Authentication = pulsarclient.NewAuthenticationToken(token)
	}
	if cfg.HasCredentials {
		auth, err := pulsarclient.NewAuthenticationBasic(cfg.Username, cfg.Password)
		if err != nil {
			return nil, &adapters.ParamError{Param: "credentials", Reason: "basic authentication: " + err.Error()}
		}
		co.Authentication = auth
	}
	if secure {
		co.TLSConfig = cfg.TLS()
		co.TLSValidateHostname = !co.TLSConfig.InsecureSkipVerify
	}
	client, err := pulsarclient.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("%w: pulsar client: %v", ports.ErrInvalid, err)
	}
	a, err := New(append(opts, WithClient(client))...)
	if err != nil {
		client.Close()
		return nil, err
	}
	return reachable(&ownedClient{Adapter: a, close: client.Close})
}

// ownedClient closes a broker client the opener created, once, after the
// adapter on it closed.
type ownedClient struct {
	ports.Adapter
	close func()
	once  sync.Once
}

func (o *ownedClient) Close(ctx context.Context) error {
	err := o.Adapter.Close(ctx)
	o.once.Do(o.close)
	return err
}

// Unwrap returns the adapter.
func (o *ownedClient) Unwrap() ports.Adapter { return o.Adapter }

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

// probe dials host (host:port) once within timeout, or until ctx ends.
func probe(ctx context.Context, host string, timeout time.Duration) error {
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "6650")
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(dctx, "tcp", host)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no connection within the connect timeout %v", timeout)
		}
		return &ConnectError{Addr: host, Err: err}
	}
	return conn.Close()
}
