package mqtt

import "github.com/sluicemq/sluice/ports"

// PhysicalTopic is the MQTT topic of logical topic t under namespace ns.
// Tests only: foreign producers' tests publish to it.
func PhysicalTopic(ns string, t ports.Topic) string { return physicalTopic(ns, t) }
