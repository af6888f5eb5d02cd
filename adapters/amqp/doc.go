// Package amqp is sluice's RabbitMQ adapter (AMQP 0-9-1, on
// github.com/rabbitmq/amqp091-go): a driver under the portable layer
// (adapters/portable), which owns settlement, the in-flight bound,
// reconnect backoff, Errors and the capability line.
//
//	a, err := amqp.New(ctx, amqp.Options{URL: "amqp://guest:guest@127.0.0.1:5672/"})
//
// One durable direct exchange "<ns>.topics" routes by logical topic.
// LOAD_BALANCE is one durable queue per group, BROADCAST one queue per
// instance with x-expires; queues are quorum queues by default. Send
// publishes with confirms and the mandatory flag (a message no queue is
// bound for fails with ports.ErrNoSubscriber); a publish in doubt when
// its channel is lost is reported unconfirmed. An ack is one basic.ack,
// with multiple set when the acked records are the channel's oldest; a
// requeue is a confirmed copy to the subscription's own queue (through a
// delay queue for a delay) with the count incremented, then an ack; a
// dead letter is a confirmed copy to "<topic>.dlq", then an ack. The
// redelivery count adds the broker's: x-delivery-count on quorum queues
// (exact), the redelivered flag on classic ones (a lower bound). Delays
// use delay queues whose x-message-ttl dead-letters into the topic
// exchange. Stop closes the channel: the broker requeues what is unacked.
// Watermill runs over the adapter through adapters/watermill;
// WatermillAMQPConfig lets a watermill-amqp service exchange messages
// with sluice.
package amqp
