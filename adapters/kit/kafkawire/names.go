package kafkawire

import (
	"cmp"

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

// Group is the group of spec: the namespace and the group for LoadBalance,
// one of its own per spec.Instance for Broadcast.
func Group(ns string, spec ports.SubscriptionSpec) string {
	if spec.Mode == ports.Broadcast {
		return ns + "." + cmp.Or(spec.Group, spec.Topic.Physical("..")) + ".bcast." + spec.Instance
	}
	return ns + "." + spec.Group
}
