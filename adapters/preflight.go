package adapters

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Preflight dials addrs within timeout, for broker clients that retry a
// refused connection or cannot tell a failed TLS handshake from a closed
// connection. It returns the refusal when every address refuses the
// connection; with conf, the explained failure (a *TLSError) of the TLS
// handshake with the first address that answers, verified against the
// address's host unless conf names a server. nil when an address answered
// (and its handshake succeeded), or a dial failed otherwise: the client
// then reports that.
func Preflight(addrs []string, conf *tls.Config, timeout time.Duration) error {
	var refused error
	for _, addr := range addrs {
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused = err
			continue
		} else if err != nil {
			return nil
		}
		defer conn.Close()
		if conf == nil {
			return nil
		}
		host, _, _ := net.SplitHostPort(addr)
		if err := handshake(conn, ClientTLS(conf, host), timeout); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return &TLSError{Addr: addr, Reason: fmt.Sprintf("no answer to the TLS handshake within %v: is this a plaintext port? use the broker's TLS listener", timeout), Err: err}
			}
			return ExplainTLS(addr, err)
		}
		return nil
	}
	return refused
}

// SpeaksTLS reports whether addr completes a TLS handshake within timeout,
// verifying nothing: it tells a TLS listener from a plaintext one.
func SpeaksTLS(addr string, timeout time.Duration) bool {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return false
	}
	defer conn.Close()
	return handshake(conn, &tls.Config{InsecureSkipVerify: true}, timeout) == nil //nolint:gosec // detection only, nothing is sent
}

func handshake(conn net.Conn, conf *tls.Config, timeout time.Duration) error {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return tls.Client(conn, conf).Handshake()
}
