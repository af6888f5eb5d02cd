package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit"
)

// connector owns one AMQP connection and dials it again, lazily, when it
// was lost. For amqps it does the TLS handshake itself (adapters.DialTLS)
// and gives amqp091 a plaintext URL, so that a TLS alert is not lost.
type connector struct {
	*kit.Lazy[*amqp.Connection]
	name, addr, dialURL string // addr: the URL without its password
	cfg                 amqp.Config
	tls                 *tls.Config // amqps
}

func newConnector(name string, o Options) *connector {
	u, _ := url.Parse(o.URL) // validated
	c := &connector{name: name, addr: u.Redacted(), dialURL: o.URL,
		cfg: amqp.Config{Heartbeat: o.Heartbeat, Properties: amqp.Table{"connection_name": "sluice-" + o.Namespace + "-" + name}}}
	c.Lazy = kit.NewLazy(func(ctx context.Context) (*amqp.Connection, error) {
		conn, err := kit.DialTimeout(ctx, "RabbitMQ", c.addr, o.DialTimeout, c.dial)
		if err != nil {
			return nil, fmt.Errorf("amqp: dial (%s connection): %w", c.name, err)
		}
		return conn, nil
	}, func(conn *amqp.Connection) bool { return !conn.IsClosed() })
	if o.External {
		c.cfg.SASL = []amqp.Authentication{&amqp.ExternalAuth{}}
	}
	if u.Scheme == "amqps" {
		if u.Port() == "" {
			u.Host = net.JoinHostPort(u.Hostname(), "5671")
		}
		u.Scheme, c.tls = "amqp", adapters.ClientTLS(o.TLS, u.Hostname())
		c.dialURL = u.String()
	}
	return c
}

// channel opens a channel, dialling first if there is no connection.
func (c *connector) channel(ctx context.Context) (*amqp.Channel, error) {
	conn, err := c.Get(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel (%s connection): %w", c.name, err)
	}
	return ch, nil
}

// with runs f on a channel of its own.
func (c *connector) with(ctx context.Context, f func(*amqp.Channel) error) error {
	ch, err := c.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	return f(ch)
}

// dial connects within ctx and says why it could not.
func (c *connector) dial(ctx context.Context) (*amqp.Connection, error) {
	cfg, addr := c.cfg, c.addr
	var ac *adapters.AlertConn
	var raw net.Conn // amqp091 leaves it open when the answer to its header was no connection.start
	cfg.Dial = func(network, a string) (conn net.Conn, err error) {
		if c.tls == nil {
			conn, err = adapters.DialPlain(ctx, network, a) // amqp091 clears the deadline once the connection is open
		} else if ac, err = adapters.DialTLS(ctx, network, a, c.tls); err == nil {
			conn = ac
		}
		raw = conn
		return conn, err
	}
	conn, err := amqp.DialConfig(c.dialURL, cfg)
	if err != nil && raw != nil {
		defer raw.Close() // after the TLS alert is read
	}
	if ac != nil {
		ac.Dialed()
		if alert := ac.Alert(addr); err != nil && alert != nil {
			return nil, alert // the reason, whatever amqp091 made of the close
		}
	}
	if err == nil {
		return conn, nil
	}
	switch ext := c.cfg.SASL != nil; {
	case errors.Is(err, amqp.ErrCredentials) && ext:
		err = fmt.Errorf("RabbitMQ refused the SASL EXTERNAL login: it takes the user name from the client certificate (ssl_cert_login_from, the common name by default), and that user must exist and have access to the virtual host: %w", err)
	case errors.Is(err, amqp.ErrCredentials):
		err = fmt.Errorf("RabbitMQ refused the user name and password (or the user has no access from this host): %w", err)
	case errors.Is(err, amqp.ErrSASL) && ext:
		err = fmt.Errorf("RabbitMQ does not offer SASL EXTERNAL: enable the rabbitmq_auth_mechanism_ssl plugin and add EXTERNAL to auth_mechanisms: %w", err)
	case errors.Is(err, amqp.ErrVhost):
		err = fmt.Errorf("the user has no access to this virtual host: %w", err)
	case c.tls != nil:
		return nil, adapters.ExplainTLS(addr, err)
	case adapters.ClosedEarly(err) || errors.Is(err, amqp.ErrFrame) || errors.Is(err, amqp.ErrSyntax) || errors.Is(err, amqp.ErrCommandInvalid) ||
		strings.Contains(err.Error(), "frame could not be parsed"):
		// amqp091's report of a TLS listener's alert, close or answer, or of a handshake timeout
		return nil, fmt.Errorf("%w: %w", adapters.ErrTLS, adapters.NotPlaintext(addr, "AMQP", "amqps", err))
	default:
		return nil, err
	}
	return nil, fmt.Errorf("%w: %w", adapters.ErrAuth, err)
}

// close closes the connection for good.
func (c *connector) close(ctx context.Context) error {
	return c.Close(ctx, func(conn *amqp.Connection) error {
		if err := conn.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) && !conn.IsClosed() {
			return fmt.Errorf("amqp: close %s connection: %w", c.name, err)
		}
		return nil // closed, possibly because the network had already broken it
	})
}
