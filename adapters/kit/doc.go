// Package kit is the machinery sluice's drivers share and no broker
// provides the same way, written once. The portable layer assembles the
// contract's pieces into the Port: the Errors channel that never blocks
// ([Errors]), the requeue and dead-letter copies with their header rules
// ([RequeueCopy], [DeadLetterCopy]), settlement by confirmed republish for
// brokers without native requeue counts or dead-letter queues ([Settler]
// over a [Broker], with the per-delivery state machine of [Tracker]), the
// local delay for brokers without native delay ([Delayer], over package
// schedule), reconnect with backoff ([Backoff], [Reconnect]) and the record
// of declared topics for brokers that cannot store a topic's properties
// ([Declared]).
//
// Drivers use the rest directly, each where its broker has the shape:
//
//   - publishing: per-message confirms that arrive asynchronously
//     ([Confirms]), one call per message where the client has no batch
//     ([SendEach]), a connect timeout whose error says what to check
//     ([DialTimeout]), a blocking call bounded by ctx ([Await]);
//   - partitioned logs: offsets committed without gaps ([Offsets],
//     [Partitions]), one record per key out at a time ([KeyHold]), the
//     records of several partitions decoded in parallel and handed to one
//     receiver in order ([Feed], fed from [Lanes]), members that rank themselves for a
//     single-active group ([SingleActive]), small per-record values
//     carved from chunks that consecutive records share ([Carve]);
//   - held records and leases: a subscription's table of records out
//     ([Held]), a claim one holder has at a time across processes
//     ([Lease]), a driver's background timers ([Periodic]), a foreign
//     encoding kept until the last holder lets go ([Originals]);
//   - pulled records: one fetching goroutine whose window grows while
//     the handlers settle a backlog ([Prefetcher]), acknowledgements that
//     ride on the next request of their session ([AckSession],
//     [GroupAcks], [SettledAcks]) or, deferred, on the driver's next read
//     ([RidingAcks]), settlements sent as ranges of contiguous offsets
//     ([Runs]);
//   - names and configuration: adopted names and their validation
//     ([ExistingGroup], [CheckExistingNames]), a one-to-one escape of a
//     forbidden byte ([EscapeByte]), a client's process-wide logger
//     routed to the adapter opened last ([ClientLog]), header names a
//     record decoder interns ([Names]).
//
// A new adapter writes a driver over the portable layer (see
// docs/writing-an-adapter.md) and takes from here what fits its broker.
// Acknowledgements are batched in one place only, flow's settlement engine;
// there is no second coalescer here: what is here carries a settled batch
// to the wire (on a request the driver makes anyway, as a cumulative ack,
// as ranges). The package imports no broker client and nothing of flow.
package kit
