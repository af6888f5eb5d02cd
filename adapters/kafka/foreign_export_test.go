package kafka

import "github.com/sluicemq/sluice/ports"

// PhysicalTopic is the Kafka topic of logical topic t under namespace ns.
// Tests only: a foreign producer's test writes to it.
func PhysicalTopic(ns string, t ports.Topic) string {
	return (&conn{opts: Options{Namespace: ns}}).topic(t)
}
