package kafkawire

import (
	"cmp"
	"fmt"
	"strings"
	"sync"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Topic is the Kafka topic of t in namespace ns: the namespace, a dot and
// t.Physical("..") with '_' escaped (Kafka takes '.' and '_' as one
// character). The Kafka adapters name topics alike, so each reads the
// others' topics.
func Topic(ns string, t ports.Topic) string {
	return ns + "." + kit.EscapeByte(t.Physical(".."), '_', '-', 'u')
}

// Topics is Topic for one namespace, each topic's name built once (a
// sender names one per record). The zero value is ready; it is safe for
// concurrent use.
type Topics struct{ names sync.Map } // ports.Topic → string

// Topic returns Topic(ns, t); ns must be the same on every call.
func (n *Topics) Topic(ns string, t ports.Topic) string {
	if phys, ok := n.names.Load(t); ok {
		return phys.(string)
	}
	phys := Topic(ns, t)
	n.names.Store(t, phys)
	return phys
}

// Group is the group of spec: the namespace and the group for LoadBalance,
// one of its own per spec.Instance for Broadcast.
func Group(ns string, spec ports.SubscriptionSpec) string {
	if spec.Mode == ports.Broadcast {
		return ns + "." + cmp.Or(spec.Group, spec.Topic.Physical("..")) + ".bcast." + spec.Instance
	}
	return ns + "." + spec.Group
}

// CheckTopics validates a map adopting Kafka topics for logical topics
// (an Options.Existing's, named by field): kit.CheckExistingNames, and no
// '/' or ' ' in a Kafka topic name.
func CheckTopics(field string, topics map[ports.Topic]string) error {
	for t, p := range topics {
		if strings.ContainsAny(p, "/ ") {
			return &ports.ValueError{Field: field, Reason: fmt.Sprintf("topic %q maps to an invalid Kafka topic name %q", string(t), p)}
		}
	}
	return kit.CheckExistingNames(field, topics)
}
