package ports

import (
	"errors"
	"fmt"
)

// Portable error codes: every adapter reports a broker failure with one of
// them (besides ErrClosed, ErrUnconfirmed, ErrNoSubscriber and
// ErrTooLarge, defined with the values they describe), so that a caller
// tests errors.Is(err, ports.ErrAuth) the same way whatever the broker.
// An adapter's driver classifies its client's errors; the error returned
// is a *BrokerError that matches its code and unwraps to the client's
// error.
var (
	// ErrRefused: the broker's host answered but refused the connection
	// (nothing listens on the port). Reported at once, never after a
	// connect timeout.
	ErrRefused = errors.New("connection refused")
	// ErrUnreachable: the broker's host could not be reached (no route,
	// unknown host, connection lost).
	ErrUnreachable = errors.New("broker unreachable")
	// ErrTimeout: the broker did not answer in time.
	ErrTimeout = errors.New("broker did not answer in time")
	// ErrAuth: the broker refused the credentials or the permission.
	ErrAuth = errors.New("authentication or authorisation refused")
	// ErrTLS: the TLS handshake failed. Reported only on a TLS
	// connection.
	ErrTLS = errors.New("TLS handshake failed")
	// ErrNotFound: a topic, queue or group the operation needs does not
	// exist and is not created by it.
	ErrNotFound = errors.New("not found on the broker")
)

// BrokerError is a broker failure classified with a portable code.
type BrokerError struct {
	// Op is what was being done ("send", "receive", "ack", "subscribe").
	Op string
	// Code is the portable code (ErrRefused, …), or nil when none applies.
	Code error
	// Retryable says whether the same operation may succeed after a
	// reconnect.
	Retryable bool
	// Err is the broker client's error.
	Err error
}

func (e *BrokerError) Error() string {
	if e.Code == nil || errors.Is(e.Err, e.Code) {
		return fmt.Sprintf("%s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("%s: %v: %v", e.Op, e.Code, e.Err)
}

// Unwrap returns the broker client's error.
func (e *BrokerError) Unwrap() error { return e.Err }

// Is makes a BrokerError match its Code.
func (e *BrokerError) Is(target error) bool { return e.Code != nil && target == e.Code }
