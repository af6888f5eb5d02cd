// Package kit is the machinery every sluice adapter needs and no broker
// provides the same way, written once: the buffer behind
// Subscription.Receive ([Inbox]), the Errors channel that never blocks
// ([Errors]), the requeue and dead-letter copies with their header rules
// ([RequeueCopy], [DeadLetterCopy]), settlement by confirmed republish for
// brokers without native requeue counts or dead-letter queues ([Settler]
// over a [Broker], with the per-delivery state machine of [Tracker]), the
// local delay for brokers without native delay ([Delayer], over
// schedule), acknowledgement coalescing ([Coalescer]), reconnect
// with backoff ([Backoff], [Reconnect]), a connect timeout whose error
// says what to check ([DialTimeout]) and the record of declared topics for
// brokers that cannot store a topic's properties ([Declared]).
//
// An adapter maps its broker and nothing more: it implements [Broker] (ack
// the originals, publish with confirms) and, where the broker has them,
// [NativeRequeue] and [NativeDeadLetter]; the kit carries out
// ports.Subscription.Settle's contract on top. The package imports no
// broker client and nothing of flow; third-party adapters use it the same
// way the adapters in this repository do, and the TCK certifies them alike.
package kit
