// Package kafkawire holds what the adapters speaking the Kafka protocol
// share whatever their client: the classes of the protocol's error codes
// and the common part of their URLs.
package kafkawire

import (
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// Class returns the class of a Kafka protocol error code (sarama's
// KError, franz-go's kerr.Error.Code); ok is false for a code it does not
// name.
func Class(code int16) (class driver.Class, ok bool) {
	class, ok = classes[code]
	return class, ok
}

var (
	auth        = driver.Class{Code: ports.ErrAuth}
	tooLarge    = driver.Class{Code: ports.ErrTooLarge}
	notFound    = driver.Class{Code: ports.ErrNotFound, Retryable: true}
	timeout     = driver.Class{Code: ports.ErrTimeout, Retryable: true}
	unreachable = driver.Class{Code: ports.ErrUnreachable, Retryable: true}
)

// classes by the protocol's error codes (their names in the Kafka source).
var classes = map[int16]driver.Class{
	3:   notFound,    // UNKNOWN_TOPIC_OR_PARTITION
	5:   unreachable, // LEADER_NOT_AVAILABLE
	6:   unreachable, // NOT_LEADER_OR_FOLLOWER
	7:   timeout,     // REQUEST_TIMED_OUT
	8:   unreachable, // BROKER_NOT_AVAILABLE
	10:  tooLarge,    // MESSAGE_TOO_LARGE
	15:  unreachable, // COORDINATOR_NOT_AVAILABLE
	16:  unreachable, // NOT_COORDINATOR
	18:  tooLarge,    // RECORD_LIST_TOO_LARGE
	29:  auth,        // TOPIC_AUTHORIZATION_FAILED
	30:  auth,        // GROUP_AUTHORIZATION_FAILED
	31:  auth,        // CLUSTER_AUTHORIZATION_FAILED
	33:  auth,        // UNSUPPORTED_SASL_MECHANISM
	34:  auth,        // ILLEGAL_SASL_STATE
	58:  auth,        // SASL_AUTHENTICATION_FAILED
	69:  notFound,    // GROUP_ID_NOT_FOUND
	100: notFound,    // UNKNOWN_TOPIC_ID
}
