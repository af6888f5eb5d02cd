package activemq

import (
	"strings"

	"github.com/sluicemq/sluice/ports"
)

// Physical names: a topic is the virtual topic
// /topic/VirtualTopic.<ns>.<topic>, a group consumes
// /queue/Consumer.<group>.VirtualTopic.<ns>.<topic>, a Broadcast instance
// /queue/Consumer.<group>__<instance>.VirtualTopic.<ns>.<topic>; a
// dead-letter topic is the plain queue /queue/<ns>.<topic>.dlq (stored
// before anyone subscribed). See docs/adapters/activemq.md.

func (d *conn) physical(t ports.Topic) string { return d.opts.Namespace + "." + scopedPhysical(t) }

func isDeadLetterTopic(t ports.Topic) bool {
	return strings.HasSuffix(string(t), ports.DeadLetterSuffix)
}

// sendDest is where Send publishes a message for t.
func (d *conn) sendDest(t ports.Topic) string {
	if isDeadLetterTopic(t) {
		return "/queue/" + d.physical(t)
	}
	if e, ok := d.adopted(t); ok {
		return e.Destination
	}
	return "/topic/VirtualTopic." + d.physical(t)
}

// queueFor is the queue a subscription consumes.
func (d *conn) queueFor(spec ports.SubscriptionSpec) (string, error) {
	if isDeadLetterTopic(spec.Topic) {
		return "/queue/" + d.physical(spec.Topic), nil
	}
	if e, ok := d.adopted(spec.Topic); ok {
		return adoptedQueue(e, spec)
	}
	return consumerQueue(spec, "VirtualTopic."+d.physical(spec.Topic)), nil
}

// consumerQueue is the virtual-topic consumer queue of spec on the
// virtual topic vt ("VirtualTopic.<name>").
func consumerQueue(spec ports.SubscriptionSpec, vt string) string {
	name := escape(spec.Group)
	if spec.Mode == ports.Broadcast {
		name += "__" + escape(spec.Instance)
	}
	return "/queue/Consumer." + name + "." + vt
}

// escape makes s one destination segment: letters, digits and '-' stay,
// every other byte becomes "_xx" (lower-case hex), so different inputs
// give different segments and "__" never appears in the output.
func escape(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
