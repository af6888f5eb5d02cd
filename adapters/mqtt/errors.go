package mqtt

import (
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/ports"
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

// ErrInstanceShared is reported when the broker disconnected a
// subscription because another connection with the same client id took
// its session over (MQTT 5 reason 0x8E, "Session taken over"): two running
// instances share one Instance (SubscriptionSpec.Instance, or for a
// LoadBalance member Options.Instance). The displaced subscription does
// not reconnect — that would take the session back, and the two would
// take it from each other for ever, each receiving part of one instance's
// stream — so its Receive fails with a *SessionTakenOverError once what it
// had received is handed out. Give every running instance its own
// Instance. It is ports.ErrInstanceShared.
var ErrInstanceShared = ports.ErrInstanceShared

// SessionTakenOverError reports that the broker handed the MQTT session of
// Instance (client id ClientID) to another connection. It matches
// ErrInstanceShared with errors.Is.
type SessionTakenOverError struct {
	Instance string
	ClientID string
	Reason   string // how the takeover showed (the broker's reason, or the takeover war)
}

func (e *SessionTakenOverError) Error() string {
	msg := fmt.Sprintf("mqtt: the session of instance %q (client id %s) was taken over by another connection with the same client id: two running instances share the instance %q; this one stopped receiving — give each running instance its own Instance",
		e.Instance, e.ClientID, e.Instance)
	if e.Reason != "" {
		msg += " (the broker " + e.Reason + ")"
	}
	return msg
}

// Is matches ErrInstanceShared.
func (e *SessionTakenOverError) Is(target error) bool { return target == ErrInstanceShared }
