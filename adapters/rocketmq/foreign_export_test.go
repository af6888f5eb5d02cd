package rocketmq

import "github.com/sluicemq/sluice/ports"

// TopicName is the RocketMQ topic of logical topic t. Tests only: foreign
// producers' tests send to it.
func TopicName(t ports.Topic) (string, error) { return brokerName("topic", t.Physical("..")) }
