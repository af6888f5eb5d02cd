package mqtt

import (
	"fmt"
	"strings"

	"github.com/sluicemq/sluice/ports"
)

// dlqLevel is the last topic level of a dead-letter topic.
const dlqLevel = "/dlq"

// physicalTopic is "<ns>/<topic>" (a scoped topic's levels stay levels),
// and "<ns>/<topic>/dlq" for the dead-letter topic "<topic>.dlq".
func physicalTopic(ns string, t ports.Topic) string {
	if base, ok := t.DeadLetterOf(); ok {
		return ns + "/" + string(base) + dlqLevel
	}
	return ns + "/" + string(t)
}

// clientID is the stable client id of one subscription instance: unique
// among live connections, reused by a restart to resume the session.
func clientID(ns string, spec ports.SubscriptionSpec, instance string) string {
	mode := "lb"
	if spec.Mode == ports.Broadcast {
		mode = "bc"
	}
	return ns + ":" + mode + ":" + string(spec.Topic) + ":" + spec.Group + ":" + instance
}

// checkName refuses, as field, a name that cannot be a topic level or a
// share name; why says what the name is for.
func checkName(field, s, why string) error {
	if s != "" && !strings.ContainsAny(s, "/+#$\x00") {
		return nil
	}
	return &ports.ValueError{Field: field, Reason: fmt.Sprintf("%q must be non-empty without '/', '+', '#' or '$'%s", s, why)}
}

// noMatchingSubscribers is the PUBACK reason code of a publish the broker
// routed to no session: it was dropped.
const noMatchingSubscribers = 0x10
