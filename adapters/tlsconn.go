package adapters

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
)

// AlertConn is a client TLS connection that keeps its first read error:
// the TLS alert of a broker that refused the client certificate after the
// handshake, which broker clients often report only as a closed
// connection. The alert must be read to be kept: when the broker sends it
// and resets before the client's reader ran, the client's first write
// fails and the client closes the socket, so its reader would see "use of
// closed network connection". So until Dialed, a Close after a failed
// write (before any read failed) is held until a read fails or Dialed is
// called, bounded by the deadline DialTLS set on the socket.
type AlertConn struct {
	net.Conn
	mu                sync.Mutex
	readErr, writeErr error
	dialing, held     bool
}

// DialTLS connects to addr, sets ctx's deadline on the socket, performs
// the TLS handshake with cfg and returns the connection in its dialing
// state; the caller hands it to its broker client and calls Dialed when
// the client's dial returned.
func DialTLS(ctx context.Context, network, addr string, cfg *tls.Config) (*AlertConn, error) {
	conn, err := DialPlain(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return &AlertConn{Conn: tc, dialing: true}, nil
}

// DialPlain connects to addr and sets ctx's deadline on the socket, for a
// broker client that clears it once its handshake is done.
func DialPlain(ctx context.Context, network, addr string) (net.Conn, error) {
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
	return conn, nil
}

func (r *AlertConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	return n, r.keep(&r.readErr, err)
}

func (r *AlertConn) Write(p []byte) (int, error) {
	n, err := r.Conn.Write(p)
	return n, r.keep(&r.writeErr, err)
}

func (r *AlertConn) keep(first *error, err error) error {
	if err != nil {
		r.mu.Lock()
		if *first == nil {
			*first = err
		}
		r.mu.Unlock()
	}
	return err
}

// Close closes the connection, except as described on AlertConn.
func (r *AlertConn) Close() error {
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

// Dialed ends the dial: a held Close is done now, later ones at once.
func (r *AlertConn) Dialed() {
	r.mu.Lock()
	r.dialing = false
	held := r.held
	r.held = false
	r.mu.Unlock()
	if held {
		r.Conn.Close()
	}
}

// Alert returns the first read error as a *TLSError (see ExplainTLS) when
// it is one ExplainTLS recognises and not merely the end of the
// connection; otherwise nil. Call it after a failed dial.
func (r *AlertConn) Alert(addr string) error {
	r.mu.Lock()
	err := r.readErr
	r.mu.Unlock()
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "connection reset") {
		return nil
	}
	if e := ExplainTLS(addr, err); errors.Is(e, ErrTLS) {
		return e
	}
	return nil
}
