package rocketmq

import (
	"fmt"
	"strings"

	"github.com/sluicemq/sluice/ports"
)

// brokerName maps a sluice topic or group name to a RocketMQ resource name.
// RocketMQ allows letters, digits, '-', '_', '%' and '|'; sluice topics may
// also contain '.', which becomes '|' ('|' cannot occur in a sluice topic,
// so the mapping is reversible, and no RocketMQ system topic uses it).
func brokerName(what, s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("%w: rocketmq %s name is empty", ports.ErrInvalid, what)
	}
	out := strings.ReplaceAll(s, ".", "|")
	if i := strings.IndexFunc(out, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '|' || r == '%')
	}); i >= 0 {
		return "", fmt.Errorf("%w: rocketmq %s %q has character %q at %d, which RocketMQ does not allow (letters, digits, '-', '_', '.')", ports.ErrInvalid, what, s, out[i], i)
	}
	if len(out) > MaxNameLength {
		return "", fmt.Errorf("%w: rocketmq %s %q is %d characters; RocketMQ allows %d", ports.ErrInvalid, what, s, len(out), MaxNameLength)
	}
	return out, nil
}

// sluiceTopic is the inverse of brokerName for topics.
func sluiceTopic(s string) ports.Topic { return ports.Topic(strings.ReplaceAll(s, "|", ".")) }
