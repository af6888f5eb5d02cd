// Package amqp is sluice's RabbitMQ adapter (AMQP 0-9-1): it implements
// ports.Adapter with github.com/rabbitmq/amqp091-go on every path that
// settles or confirms, and offers Watermill a publisher and subscriber over
// the same paths (see NewWatermillPublisher).
//
//	a, err := amqp.New(ctx, amqp.Options{URL: "amqp://guest:guest@127.0.0.1:5672/"})
//	...
//	p := flow.New(a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
//
// # Topology
//
// One durable direct exchange "<ns>.topics" routes by logical topic: every
// queue bound under a topic's name gets a copy. LOAD_BALANCE is one durable
// queue per group ("<ns>/<topic>/lb/<group>"), consumed by every instance of
// the group. BROADCAST is one queue per instance
// ("<ns>/<topic>/bc/<group>/<instance>") with x-expires set to the
// instance TTL, so an idle instance's queue is removed by the broker. Queues
// are quorum queues by default (Options.QueueType).
//
// # Settlement
//
// A delivery is acked only when Settle is called with Ack, after its
// completion succeeded. Requeue publishes a copy with the redelivery count
// incremented (with a confirm, through a delay queue when there is a
// backoff) and acks the original after the confirm; DeadLetter publishes to
// the "<topic>.dlq" topic with a confirm, then acks. Acks are coalesced into
// multiple-acks where tags are contiguous. Stop closes the channel, so the
// broker requeues everything unsettled; it acks nothing.
//
// # Redelivery count
//
// Delivery.RedeliveryCount is the sluice-redelivery-count header (requeues
// the adapter carried out) plus the broker's count of returns of this copy
// (consumer stopped or crashed without settling): x-delivery-count on
// quorum queues, exact; the boolean redelivered flag on classic queues, a
// lower bound.
//
// # Delay
//
// Delayed messages and delayed requeues use RabbitMQ without plugins: the
// message is published (with a confirm) to a delay queue whose
// x-message-ttl is the delay rounded up to a geometric grid
// (Options.DelayGranularity) and which dead-letters into the topic
// exchange when the TTL expires. All messages of a delay queue have the
// same TTL, so they expire in order.
//
// # Failures
//
// Connection and channel loss are reported on Subscription.Errors; the
// subscription reconnects with backoff, declares its queue again and
// consumes again. Nothing is acked on the way: deliveries of the lost
// channel fail to settle with ErrDeliveryLost and the broker redelivers
// them. Send reports unconfirmed publishes as *UnconfirmedError.
package amqp
