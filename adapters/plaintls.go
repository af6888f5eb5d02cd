package adapters

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// ExplainPlaintext explains err, the failure of a plaintext client to
// connect to addr: a *PlaintextOnTLSError when the broker closed the
// connection early and addr answers a TLS handshake (tlsScheme is the URL
// scheme to use instead), else err.
func ExplainPlaintext(addr, tlsScheme string, err error) error {
	if err == nil || !ClosedEarly(err) || !SpeaksTLS(addr, 2*time.Second) {
		return err
	}
	return &PlaintextOnTLSError{Addr: addr, Scheme: tlsScheme, Err: err}
}

// NotPlaintext is the error of a plaintext client whose first exchange
// with addr the broker closed, or answered with something the client could
// not read as protocol: what a TLS listener does, so the advice is
// tlsScheme. It wraps err and labels nothing: the caller adds the
// portable code it gives this failure.
func NotPlaintext(addr, protocol, tlsScheme string, err error) error {
	return fmt.Errorf("%s closed the plaintext connection or answered something that is not %s: not a plaintext port? is this a TLS port? then use %s://: %w", addr, protocol, tlsScheme, err)
}

// ClosedEarly reports a connection the broker closed or reset, as clients
// that cannot tell why report it.
func ClosedEarly(err error) bool {
	return errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset")
}

// PlaintextOnTLSError is a plaintext client that reached a TLS listener.
type PlaintextOnTLSError struct {
	Addr, Scheme string
	Err          error
}

func (e *PlaintextOnTLSError) Error() string {
	return fmt.Sprintf("the broker at %s is a TLS listener (it closed the plaintext connection and answers a TLS handshake): use %s:// (%v)", e.Addr, e.Scheme, e.Err)
}

func (e *PlaintextOnTLSError) Unwrap() error { return e.Err }
