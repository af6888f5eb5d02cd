package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// connector owns one AMQP connection and dials it again, lazily, when it
// was lost. For amqps it does the TLS handshake itself and hands amqp091
// the TLS connection with a plaintext URL (dialURL), so that the TLS
// layer's own error (a client certificate refused on the first read) is
// kept rather than lost behind amqp091's "use of closed network
// connection".
type connector struct {
	name, url, dialURL string
	cfg                amqp.Config
	to                 time.Duration
	secure             bool
	tls                *tls.Config

	lock chan struct{} // a mutex that can be abandoned on ctx
	conn *amqp.Connection
	shut bool
}

func newConnector(name string, o Options) *connector {
	c := &connector{name: name, url: o.URL, dialURL: o.URL, to: o.DialTimeout, secure: strings.HasPrefix(o.URL, "amqps:"), lock: make(chan struct{}, 1),
		cfg: amqp.Config{Heartbeat: o.Heartbeat, Properties: amqp.Table{"connection_name": "sluice-" + o.Namespace + "-" + name}}}
	if o.External {
		c.cfg.SASL = []amqp.Authentication{&amqp.ExternalAuth{}}
	}
	if u, err := url.Parse(c.url); err == nil && c.secure {
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
	}
	return c
}

// get returns the open connection, dialling a new one if there is none or
// it was closed; ports.ErrClosed after close.
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
	conn, err := kit.DialTimeout(ctx, "RabbitMQ", redact(c.url), c.to, c.dial)
	if err != nil {
		return nil, fmt.Errorf("amqp: dial (%s connection): %w", c.name, err)
	}
	c.conn = conn
	return conn, nil
}

// dial connects with the bound of ctx on the TCP connect and the AMQP
// handshake, and says why when the reason is TLS or the login.
func (c *connector) dial(ctx context.Context) (*amqp.Connection, error) {
	cfg := c.cfg
	var rec *recordingConn
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		deadline, _ := ctx.Deadline()
		if err := conn.SetDeadline(deadline); err != nil || c.tls == nil {
			return conn, err
		}
		tc := tls.Client(conn, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		rec = &recordingConn{Conn: tc, dialing: true}
		return rec, nil
	}
	conn, err := amqp.DialConfig(c.dialURL, cfg)
	if rec != nil {
		rec.dialed()
	}
	if err == nil {
		return conn, nil
	}
	addr := redact(c.url)
	if rec != nil {
		if cause := rec.firstErr(); cause != nil && !isEnd(cause) {
			if e := adapters.ExplainTLS(addr, cause); errors.Is(e, adapters.ErrTLS) {
				return nil, e // a TLS alert is the reason, whatever amqp091 made of the close
			}
		}
	}
	external := c.cfg.SASL != nil
	switch {
	case errors.Is(err, amqp.ErrCredentials) && external:
		return nil, fmt.Errorf("%w: RabbitMQ refused the SASL EXTERNAL login: it takes the user name from the client certificate (ssl_cert_login_from, the common name by default), and that user must exist and have access to the virtual host: %v", adapters.ErrAuth, err)
	case errors.Is(err, amqp.ErrCredentials):
		return nil, fmt.Errorf("%w: RabbitMQ refused the user name and password (or the user has no access from this host): %v", adapters.ErrAuth, err)
	case errors.Is(err, amqp.ErrSASL) && external:
		return nil, fmt.Errorf("%w: RabbitMQ does not offer SASL EXTERNAL: enable the rabbitmq_auth_mechanism_ssl plugin and add EXTERNAL to auth_mechanisms: %v", adapters.ErrAuth, err)
	case errors.Is(err, amqp.ErrVhost):
		return nil, fmt.Errorf("%w: the user has no access to this virtual host: %v", adapters.ErrAuth, err)
	case c.secure:
		return nil, adapters.ExplainTLS(addr, err)
	case errors.Is(err, io.EOF) || errors.Is(err, amqp.ErrFrame) || errors.Is(err, amqp.ErrSyntax) ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "frame could not be parsed") || strings.Contains(err.Error(), "connection reset"):
		// A TLS listener answers the AMQP header with an alert or closes.
		return nil, fmt.Errorf("%w: %s gave no AMQP answer to a plaintext connection: not a plaintext port? if it is RabbitMQ's TLS port (5671), use amqps://: %v", adapters.ErrTLS, addr, err)
	}
	return nil, err
}

// isEnd reports a connection that merely ended (no TLS alert in it).
func isEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset")
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

// recordingConn is the TLS connection of an amqps dial. It keeps the first
// read error: the TLS alert of a broker that refused the client
// certificate after the handshake, which amqp091 reports only as a closed
// connection. The alert must be read to be kept: when the broker sends it
// and resets before amqp091's reader ran, the protocol header's write
// fails and amqp091 closes the socket, so the reader would see "use of
// closed network connection". So while the dial runs, a Close after a
// failed write (before any read failed) is held until a read fails or
// dialed, bounded by the dial's deadline on the socket.
type recordingConn struct {
	net.Conn
	mu                sync.Mutex
	readErr, writeErr error
	dialing, held     bool
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	return n, r.keep(&r.readErr, err)
}

func (r *recordingConn) Write(p []byte) (int, error) {
	n, err := r.Conn.Write(p)
	return n, r.keep(&r.writeErr, err)
}

// keep records err in *first unless an error is recorded there already.
func (r *recordingConn) keep(first *error, err error) error {
	if err != nil {
		r.mu.Lock()
		*first = firstOf(*first, err)
		r.mu.Unlock()
	}
	return err
}

// firstOf returns a unless it is the zero value, else b.
func firstOf[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

func (r *recordingConn) Close() error {
	r.mu.Lock()
	if r.dialing && r.writeErr != nil && r.readErr == nil && !r.held {
		r.held = true
		r.mu.Unlock()
		return nil
	}
	r.held = false
	r.mu.Unlock()
	return r.Conn.Close()
}

// dialed ends the dial: a held Close is done now, later ones at once.
func (r *recordingConn) dialed() {
	r.mu.Lock()
	r.dialing = false
	held := r.held
	r.held = false
	r.mu.Unlock()
	if held {
		r.Conn.Close()
	}
}

func (r *recordingConn) firstErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readErr
}
