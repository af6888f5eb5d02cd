// Package mem is sluice's in-process adapter: a real message broker inside
// the process, the embedded default for services and tests that need no
// external broker, and the reference driver: the in-process broker is
// mapped by a driver (adapters/driver) with every optional interface
// (native requeue with exact counts and delay, native dead letter,
// best-effort drops, topic and group declaration), and the Port itself —
// validation, stamping, the in-flight bound, double-settlement detection,
// the identity rule, Errors — is adapters/portable's, as for every
// adapter. It declares every capability except ordering and runs every
// TCK case.
//
// A [Broker] holds topics and queues; each [Adapter] made on it with [New]
// is one "process" connected to it. [Open] uses the process-wide [Default]
// broker.
//
// # Routing
//
// Each topic feeds a set of queues. A LoadBalance subscription consumes the
// queue of its (topic, group): the group's instances compete for its
// messages, each message goes to one of them, and the queue exists from
// the group's first Subscribe on and keeps its backlog while no instance
// runs (durable groups). A Broadcast subscription consumes the queue of its
// (topic, group, instance), created by Subscribe: every instance gets its
// own copy. As with a RabbitMQ exchange, a message published to a topic
// with no queue yet reaches nobody; Send reports it as unroutable
// (ports.ErrNoSubscriber) rather than confirming it. A queue's
// KeyFilter is applied when a message is routed, so messages with other
// keys never enter the queue.
//
// # Delivery and settlement
//
// Receive hands out ready messages in queue order (FIFO), bounded by the
// subscription's InFlight. Settle carries out exactly the disposition it is
// given: Ack removes, Requeue puts the message back at the end of its queue
// with its redelivery count +1 once Disposition.Delay has passed, and
// DeadLetter publishes a copy to "<topic>.dlq" (ports.DeadLetterTopic)
// with the dead-letter headers before it removes the original. Settling a
// delivery twice, or on another subscription, is an error that settles
// nothing. Stop returns every unsettled delivery to the front of its
// queue, counted as one more redelivery, and acks nothing.
//
// Redelivery counts are exact: a message's count is the number of times it
// was delivered before (requeued or returned by Stop).
//
// # Time
//
// Delayed messages (Message.Delay), delayed requeues and instance expiry
// (SubscriptionSpec.InstanceTTL, for Broadcast queues) share one
// schedule Scheduler per broker (the module's one scheduler): a
// min-heap driven by a single timer armed for the earliest deadline, no
// goroutine per message, and none at all while nothing is due. A delayed
// message is routed when it falls due, to the queues bound then.
// [WithClock] replaces the system clock, for tests.
//
// # Bounded memory
//
// Each queue holds at most [DefaultMaxQueue] (10,000) ready messages by
// default; [WithMaxQueue] (URL parameter max_queue, 0 for unbounded) sets
// the bound of the queues an adapter subscribes to. While a queue is at its
// bound, Send to its topic blocks until a consumer takes messages or
// Send's ctx is done, and then fails that message with [ErrQueueFull]: a
// producer that outruns its consumers is slowed to their pace instead of
// growing the heap. In-flight deliveries are bounded by InFlight.
//
// # Faults
//
// [Broker.FailSends] and [Broker.FailDeadLetters] make publishes and
// dead-letter publishes go unconfirmed, so tests can prove that a failed
// send is reported and a failed dead-letter publish settles nothing (they
// back tck.SendFaults and tck.DeadLetterFaults).
//
// # Cost
//
// A published message is stored once and shared by every queue it enters
// and every delivery of it, so Headers, Payload and Facts of a delivery are
// read-only. Send allocates the stamped headers, the message and a copy of
// the payload; Receive allocates one block for all the deliveries it
// returns plus the returned slice; Ack and Requeue allocate nothing.
package mem
