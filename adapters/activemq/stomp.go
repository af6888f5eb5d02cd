package activemq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/adapters"
)

// stompConn is a STOMP connection, its socket (closed to unblock every
// waiter) and, for a subscription, its STOMP subscription.
type stompConn struct {
	c         *stomp.Conn
	sub       *stomp.Subscription
	nc        net.Conn
	dead      chan struct{} // closed once a read from nc failed: no receipt can come any more
	abandoned atomic.Bool   // closed by Abandon (once): its loss is no fault

	receiptTimeout time.Duration
}

// dial connects and completes the STOMP handshake within DialTimeout,
// with extra CONNECT options (a client id).
func (d *conn) dial(ctx context.Context, extra ...func(*stomp.Conn) error) (*stompConn, error) {
	o := d.opts
	receiptTimeout := 2*o.HeartBeat + 2*heartBeatError
	ctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	var nd net.Dialer
	nc, err := nd.DialContext(ctx, "tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("activemq: connect to %s: %w (is the broker's STOMP connector listening there?)", o.Addr, err)
	}
	if o.TLS != nil {
		tc := tls.Client(nc, o.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			if ctx.Err() != nil {
				// A plaintext connector waits for a STOMP frame the
				// TLS hello never ends.
				return nil, fmt.Errorf("activemq: %w: %s gave no TLS answer within %v: is it a plaintext stomp connector (use activemq://, or the stomp+ssl port)? or is it unreachable? %v", adapters.ErrTLS, o.Addr, o.DialTimeout, err)
			}
			return nil, fmt.Errorf("activemq: %w", adapters.ExplainTLS(o.Addr, err))
		}
		nc = tc
	}
	opts := []func(*stomp.Conn) error{
		stomp.ConnOpt.Host(o.VirtualHost),
		stomp.ConnOpt.AcceptVersion(stomp.V12),
		// The broker sends heart-beats, the client none: go-stomp 3.1.3
		// abandons a receipt wait after the client's interval and then
		// blocks forever on it. The broker's beats bound every wait.
		stomp.ConnOpt.HeartBeat(0, o.HeartBeat),
		stomp.ConnOpt.HeartBeatError(heartBeatError),
		stomp.ConnOpt.HeartBeatGracePeriodMultiplier(2), // ActiveMQ skips a beat after other frames
		stomp.ConnOpt.MsgSendTimeout(receiptTimeout),
		stomp.ConnOpt.RcvReceiptTimeout(receiptTimeout),
		stomp.ConnOpt.DisconnectReceiptTimeout(receiptTimeout),
		stomp.ConnOpt.UnsubscribeReceiptTimeout(receiptTimeout),
		stomp.ConnOpt.ReadChannelCapacity(256),
		stomp.ConnOpt.WriteChannelCapacity(256),
		stomp.ConnOpt.Logger(stompLogger{o.Logger}),
	}
	if o.Login != "" || o.Passcode != "" {
		opts = append(opts, stomp.ConnOpt.Login(o.Login, o.Passcode))
	}
	opts = append(opts, extra...)
	dead := make(chan struct{})
	c, err := stomp.ConnectWithContext(ctx, &watchedConn{Conn: nc, dead: dead}, opts...)
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (no STOMP CONNECTED within %v)", err, o.DialTimeout)
		}
		if e := explainHandshake(o.TLS != nil, o.Addr, err); e != err {
			return nil, fmt.Errorf("activemq: STOMP handshake with %s: %w", o.Addr, e)
		}
		return nil, fmt.Errorf("activemq: STOMP handshake with %s: %w (check the address names a STOMP connector and the credentials)", o.Addr, err)
	}
	return &stompConn{c: c, nc: nc, dead: dead, receiptTimeout: receiptTimeout}, nil
}

// barrier sends BEGIN and ABORT-with-receipt: the receipt comes after the
// broker processed every frame written before it on this connection.
func (c *stompConn) barrier() error {
	tx, err := c.c.BeginWithError()
	if err != nil {
		return err
	}
	return tx.AbortWithReceipt()
}

// close disconnects (gracefully: DISCONNECT with a receipt, after every
// frame written before it), then closes the socket.
func (c *stompConn) close(graceful bool) {
	if graceful {
		_ = c.c.Disconnect()
	}
	_ = c.c.MustDisconnect()
	_ = c.nc.Close()
}

// wait runs f, which writes frames and waits for a receipt, and returns
// its error; or ctx.Err(), or errLost when the socket died or the receipt
// timed out (f's outcome unknown: go-stomp 3.1.3 can block a receipt wait
// forever). Messages ahead of the receipt go from in to keep (in is nil
// on a connection that consumes nothing): go-stomp hands them over first.
func (c *stompConn) wait(ctx context.Context, f func() error, in <-chan *stomp.Message, keep func(*stomp.Message)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	timer := time.NewTimer(c.receiptTimeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-in:
			if !ok || m.Err != nil {
				in = nil // the connection ends: f's answer says how
				continue
			}
			keep(m)
		case err := <-done:
			return lostIfClosed(err)
		case <-ctx.Done():
			return ctx.Err()
		case <-c.dead:
			select {
			case err := <-done: // the answer was already there
				return lostIfClosed(err)
			default:
			}
			return errLost
		case <-timer.C:
			_ = c.nc.Close()
			return fmt.Errorf("activemq: no receipt within %v: %w", c.receiptTimeout, errLost)
		}
	}
}

// errLost marks a connection failure (the broker redelivers its messages).
var errLost = errors.New("activemq: connection lost")

// lostIfClosed marks err as errLost when go-stomp reports that the
// connection ended: it answers every pending receipt with an ERROR frame
// of its own (one message header, no body), which can reach wait before
// c.dead does. A broker's ERROR frame carries more and stays as it is.
func lostIfClosed(err error) error {
	if err == nil || errors.Is(err, errLost) {
		return err
	}
	var se stomp.Error
	synthesized := errors.As(err, &se) && se.Frame != nil && se.Frame.Command == frame.ERROR &&
		se.Frame.Header.Len() == 1 && len(se.Frame.Body) == 0
	if synthesized || errors.Is(err, stomp.ErrClosedUnexpectedly) || errors.Is(err, stomp.ErrAlreadyClosed) {
		return fmt.Errorf("%w: %w", errLost, err)
	}
	return err
}

// stompLogger routes go-stomp's log lines (otherwise printed with the
// standard log package) to the adapter's logger at debug level; a frame
// in a line is shown by its command and body size, never its payload.
type stompLogger struct{ l *slog.Logger }

func (s stompLogger) line(f string, v []any) {
	for i, a := range v {
		if fr, ok := a.(*frame.Frame); ok && fr != nil {
			v[i] = fmt.Sprintf("%s frame (%d-byte body not shown)", fr.Command, len(fr.Body))
		}
	}
	s.l.Debug("go-stomp: " + fmt.Sprintf(f, v...))
}

func (s stompLogger) Debugf(f string, v ...any)   { s.line(f, v) }
func (s stompLogger) Debug(m string)              { s.l.Debug("go-stomp: " + m) }
func (s stompLogger) Infof(f string, v ...any)    { s.line(f, v) }
func (s stompLogger) Info(m string)               { s.l.Debug("go-stomp: " + m) }
func (s stompLogger) Warningf(f string, v ...any) { s.line(f, v) }
func (s stompLogger) Warning(m string)            { s.l.Debug("go-stomp: " + m) }
func (s stompLogger) Errorf(f string, v ...any)   { s.line(f, v) }
func (s stompLogger) Error(m string)              { s.l.Debug("go-stomp: " + m) }

// watchedConn is the socket as go-stomp sees it: it closes dead when a
// read fails, and drops heart-beats (end-of-line bytes) ahead of the
// first frame, which go-stomp 3.1.3 takes for an empty CONNECTED.
type watchedConn struct {
	net.Conn
	dead    chan struct{}
	once    sync.Once
	started bool
}

func (c *watchedConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil {
			c.once.Do(func() { close(c.dead) })
		}
		if c.started || n == 0 {
			return n, err
		}
		i := 0
		for i < n && (p[i] == '\n' || p[i] == '\r') {
			i++
		}
		if i < n {
			c.started = true
			return copy(p, p[i:n]), err
		}
		if err != nil {
			return 0, err
		}
	}
}

// explainHandshake says why the STOMP handshake failed: refused
// credentials (adapters.ErrAuth: the broker's ERROR frame, whose text is
// all go-stomp gives), a client certificate refused after the TLS
// handshake (adapters.ExplainTLS), or a plaintext client cut off by a
// stomp+ssl connector (in the text only). Other errors pass.
func explainHandshake(secure bool, addr string, err error) error {
	text := err.Error()
	lower := strings.ToLower(text)
	switch {
	case strings.Contains(lower, "password is invalid") || strings.Contains(lower, "user name") ||
		strings.Contains(lower, "securityexception") || strings.Contains(lower, "not authorized"):
		return fmt.Errorf("%w: ActiveMQ refused the login and passcode: %v", adapters.ErrAuth, err)
	case secure:
		return adapters.ExplainTLS(addr, err)
	case adapters.ClosedEarly(err) || strings.Contains(text, "invalid command"): // a TLS alert record read as a frame
		return adapters.NotPlaintext(addr, "STOMP", "activemq+ssl", err)
	}
	return err
}

// isDead says whether the connection is gone.
func (c *stompConn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}
