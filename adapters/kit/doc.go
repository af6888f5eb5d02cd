// Package kit is the machinery every sluice adapter needs and no broker
// provides the same way, written once: the Errors channel that never blocks
// ([Errors]), the requeue and dead-letter copies with their header rules
// ([RequeueCopy], [DeadLetterCopy]), settlement by confirmed republish for
// brokers without native requeue counts or dead-letter queues ([Settler]
// over a [Broker], with the per-delivery state machine of [Tracker]), the
// local delay for brokers without native delay ([Delayer], over
// package schedule), reconnect with backoff ([Backoff], [Reconnect]), a
// connect timeout whose error says what to check ([DialTimeout]) and the record of declared topics for
// brokers that cannot store a topic's properties ([Declared]).
//
// These pieces are assembled once, into the Port, by adapters/portable,
// over the narrow driver interface of adapters/driver: a new adapter
// writes a driver and uses the portable layer, not the kit directly.
// Acknowledgements are batched in one place only, flow's settlement
// engine; there is no second coalescer here. The package imports no
// broker client and nothing of flow; third-party adapters use it the same
// way the adapters in this repository do, and the TCK certifies them alike.
package kit
