package mqtt

import (
	"errors"
	"fmt"
)

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
