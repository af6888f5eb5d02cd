package amqp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// connector owns one AMQP connection and dials it again, lazily, when it
// was lost. The adapter has two: one for publishing (confirms, delay queue
// declarations) and one for consuming, so that broker flow control on
// publishers never holds back acks.
type connector struct {
	name   string
	url    string // as given: amqp:// or amqps://
	cfg    amqp.Config
	to     time.Duration
	secure bool // amqps

	// For amqps the connector does the TLS handshake itself and hands
	// amqp091 the TLS connection with a plaintext URL (dialURL, the port
	// explicit), so that the TLS layer's own error — a client
	// certificate refused on the first read — is kept (rec) rather than
	// lost behind amqp091's "use of closed network connection".
	dialURL string
	tls     *tls.Config

	lock chan struct{} // a mutex that can be abandoned on ctx
	conn *amqp.Connection
	shut bool
}

func newConnector(name string, o Options) *connector {
	c := &connector{
		name:   name,
		url:    o.URL,
		to:     o.DialTimeout,
		secure: strings.HasPrefix(o.URL, "amqps:"),
		cfg: amqp.Config{
			Heartbeat:       o.Heartbeat,
			TLSClientConfig: o.TLS,
			Properties:      amqp.Table{"connection_name": "sluice-" + o.Namespace + "-" + name},
		},
		lock: make(chan struct{}, 1),
	}
	if o.External {
		c.cfg.SASL = []amqp.Authentication{&amqp.ExternalAuth{}}
	}
	c.dialURL = c.url
	if c.secure {
		if u, err := url.Parse(c.url); err == nil {
			host := u.Host
			if u.Port() == "" {
				host = net.JoinHostPort(u.Hostname(), "5671")
			}
			u.Scheme, u.Host = "amqp", host
			c.dialURL = u.String()
			c.tls = o.TLS
			if c.tls == nil {
				c.tls = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			if c.tls.ServerName == "" && !c.tls.InsecureSkipVerify {
				c.tls = c.tls.Clone()
				c.tls.ServerName = u.Hostname()
			}
			c.cfg.TLSClientConfig = nil
		}
	}
	return c
}

// get returns the open connection, dialling a new one if there is none or
// it was closed. It fails with ports.ErrClosed after close.
func (c *connector) get(ctx context.Context) (*amqp.Connection, error) {
	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.lock }()
	if c.shut {
		return nil, ports.ErrClosed
	}
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.conn = conn
	return conn, nil
}

// dial connects with a bound of DialTimeout (and ctx) on the TCP connect
// and the AMQP handshake. Its error is a *kit.DialError naming the
// address (without credentials) and what to check.
func (c *connector) dial(ctx context.Context) (*amqp.Connection, error) {
	conn, err := kit.DialTimeout(ctx, "RabbitMQ", redact(c.url), c.to, func(ctx context.Context) (*amqp.Connection, error) {
		cfg := c.cfg
		var rec *recordingConn
		cfg.Dial = func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			deadline, _ := ctx.Deadline()
			if err := conn.SetDeadline(deadline); err != nil {
				conn.Close()
				return nil, err
			}
			if c.tls != nil {
				tc := tls.Client(conn, c.tls)
				if err := tc.HandshakeContext(ctx); err != nil {
					conn.Close()
					return nil, err
				}
				rec = newRecordingConn(tc)
				conn = rec
			}
			return conn, nil
		}
		conn, err := amqp.DialConfig(c.dialURL, cfg)
		var cause error
		if rec != nil {
			rec.dialed()
			if err != nil {
				cause = rec.firstErr()
			}
		}
		return conn, explainDial(c.secure, c.cfg.SASL != nil, redact(c.url), err, cause)
	})
	if err != nil {
		return nil, fmt.Errorf("amqp: dial (%s connection): %w", c.name, err)
	}
	return conn, nil
}

// channel opens a new channel on the (possibly new) connection.
func (c *connector) channel(ctx context.Context) (*amqp.Channel, error) {
	conn, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp: open channel (%s connection): %w", c.name, err)
	}
	return ch, nil
}

// close closes the connection; later get calls fail with ErrClosed.
func (c *connector) close(ctx context.Context) error {
	select {
	case c.lock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.lock }()
	c.shut = true
	if c.conn == nil || c.conn.IsClosed() {
		return nil
	}
	if err := c.conn.Close(); err != nil && !isClosedErr(err) && !c.conn.IsClosed() {
		return fmt.Errorf("amqp: close %s connection: %w", c.name, err)
	}
	return nil // closed, possibly because the network had already broken it
}
