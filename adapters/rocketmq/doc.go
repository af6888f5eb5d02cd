// Package rocketmq is the sluice adapter for Apache RocketMQ 5, on the
// official v5 Go client (github.com/apache/rocketmq-clients/golang/v5,
// v5.1.4), which speaks gRPC to a RocketMQ 5 proxy.
//
//	a, err := rocketmq.New(ctx, rocketmq.Options{Endpoint: "127.0.0.1:8081"})
//	// or adapters.Open(ctx, "rocketmq://AK:SK@127.0.0.1:8081")
//
// It is a driver under the portable layer (adapters/portable). Send
// publishes with the producer and returns once the proxy stored every
// message; Message.Delay is RocketMQ's native delivery timestamp. Each
// subscription is a SimpleConsumer in a consumer group (LOAD_BALANCE:
// spec.Group; BROADCAST: a group per instance) that long polls with an
// invisible duration, renewed while a message is held: ACK is
// AckMessage, REQUEUE is ChangeInvisibleDuration(delay) with the exact
// redelivery count from the delivery attempt, DEAD_LETTER is the portable
// layer's confirmed copy to ports.DeadLetterTopic then AckMessage, and a
// message not settled is delivered again when its invisibility ends.
//
// Package rocketmqtest is an in-process RocketMQ 5 protocol peer for
// tests; docs/adapters/rocketmq.md says what is proven against it and
// what needs Apache RocketMQ.
package rocketmq
