package mqtt

import (
	"crypto/rand"
	"encoding/hex"
	"strings"

	"github.com/sluicemq/sluice/ports"
)

// dlqLevel is the last topic level of a dead-letter topic.
const dlqLevel = "/dlq"

// physicalTopic maps a logical topic to its MQTT topic: "<ns>/<topic>",
// and the logical dead-letter topic "<topic>.dlq" to "<ns>/<topic>/dlq".
func physicalTopic(ns string, t ports.Topic) string {
	s := string(t)
	if base, ok := strings.CutSuffix(s, ports.DeadLetterSuffix); ok && base != "" {
		return ns + "/" + base + dlqLevel
	}
	return ns + "/" + s
}

// clientID is the stable MQTT client id of one subscription instance. Two
// live connections must never share it (the broker would take the session
// over); a restarted instance must reuse it to resume its session.
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

// validName reports whether s can be a topic level or share name: not
// empty and free of the MQTT wildcard and separator characters.
func validName(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/+#$\x00")
}
