package mqtt

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/sluicemq/sluice/ports"
)

// shareWhy says what a group name is for, in a checkName refusal.
const shareWhy = " (it names the MQTT shared subscription)"

// dlqLevel is the last topic level of a dead-letter topic.
const dlqLevel = "/dlq"

// physicalTopic is "<ns>/<topic>" (a scoped topic's levels stay levels),
// and "<ns>/<topic>/dlq" for the dead-letter topic "<topic>.dlq".
func physicalTopic(ns string, t ports.Topic) string {
	s := string(t)
	if base, ok := strings.CutSuffix(s, ports.DeadLetterSuffix); ok && base != "" {
		return ns + "/" + base + dlqLevel
	}
	return ns + "/" + s
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

// randomID returns 12 random hex characters.
func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// validName reports whether s can be a topic level or share name.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/+#$\x00")
}

// checkName refuses, as field, a name that is not validName; why says what
// the name is for.
func checkName(field, s, why string) error {
	if validName(s) {
		return nil
	}
	return &ports.ValueError{Field: field, Reason: fmt.Sprintf("%q must be non-empty without '/', '+', '#' or '$'%s", s, why)}
}
