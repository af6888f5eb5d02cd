package mqtt

import (
	"errors"
	"fmt"
	"sync"
)

// ErrAckDeferred is returned by Settle when the connection that received a
// delivery closed before its PUBACK could be written. The broker redelivers
// the message on the next connection; the adapter then acknowledges that
// copy without handing it out again (while the subscription runs).
var ErrAckDeferred = errors.New("mqtt: connection lost before the PUBACK; the broker's redelivery will be acknowledged")

// ErrSessionLost is reported when a connection came back without its
// session (it expired, or the broker lost its state): deliveries the broker
// held for the client are gone from the broker, and the adapter subscribes
// again.
var ErrSessionLost = errors.New("mqtt: reconnected without the previous session")

// ConnectionError reports an event on one of the adapter's MQTT
// connections: the connection was lost ("lost"), a connection attempt
// failed ("connect"), or re-subscribing after a session loss failed
// ("resubscribe"). The adapter keeps reconnecting; these are reported on
// Subscription.Errors or Adapter.Errors.
type ConnectionError struct {
	ClientID string
	Op       string
	Err      error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("mqtt: connection %s: %s: %v", e.ClientID, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *ConnectionError) Unwrap() error { return e.Err }

// errorSink is a bounded, never-blocking error channel that can be closed
// while reporters still run.
type errorSink struct {
	mu      sync.Mutex
	ch      chan error
	closed  bool
	dropped int
}

func newErrorSink(n int) *errorSink { return &errorSink{ch: make(chan error, n)} }

// report sends err without blocking; when the channel is full or closed the
// error is dropped and counted.
func (s *errorSink) report(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.dropped++
		return
	}
	select {
	case s.ch <- err:
	default:
		s.dropped++
	}
}

// close closes the channel; later reports are dropped.
func (s *errorSink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
}

// droppedCount is how many errors were dropped.
func (s *errorSink) droppedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}
