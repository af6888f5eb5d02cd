// Package rocketmq is the sluice adapter for Apache RocketMQ 5, on the
// official v5 Go client (github.com/apache/rocketmq-clients/golang/v5,
// v5.1.3), which speaks gRPC to a RocketMQ 5 proxy.
//
//	a, err := rocketmq.New(rocketmq.WithEndpoint("127.0.0.1:8081"))
//	// or adapters.Open(ctx, "rocketmq://AK:SK@127.0.0.1:8081")
//
// Send publishes with the producer and returns once the proxy stored every
// message. Each subscription is a SimpleConsumer in a consumer group
// (LOAD_BALANCE: spec.Group; BROADCAST: a group per instance) that long
// polls with an invisible duration; settlement goes through kit.Settler:
// ACK is AckMessage, REQUEUE is ChangeInvisibleDuration(delay) with the
// exact redelivery count from the delivery attempt, DEAD_LETTER is a
// confirmed publish to ports.DeadLetterTopic then AckMessage, and a
// message not settled within the invisible duration is delivered again.
// Message.Delay is RocketMQ's native delivery timestamp.
//
// The package also has a Watermill Publisher and Subscriber on the same
// client. Package rocketmqtest is an in-process RocketMQ 5 protocol peer
// for tests; docs/adapters/rocketmq.md says what is proven against it and
// what needs Apache RocketMQ.
package rocketmq
