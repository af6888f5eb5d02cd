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
