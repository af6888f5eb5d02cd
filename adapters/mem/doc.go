// Package mem is sluice's in-process adapter: a real message broker inside
// the process, the embedded default (mem://) for services and tests that
// need no external broker, and the reference driver under the portable
// layer (adapters/portable). It declares every capability except ordering
// and runs every TCK case.
//
// A [Broker] holds topics and queues; each [Adapter] made on it with [New]
// is one "process" connected to it, and [Open] uses the process-wide
// [Default] broker. A LoadBalance group consumes one FIFO queue per
// (topic, group), kept while no instance runs; a Broadcast instance gets a
// queue of its own. A message sent to a topic with no queue fails with
// ports.ErrNoSubscriber. Queues are bounded ([WithMaxQueue]); delays,
// delayed requeues and instance expiry share the module's one scheduler.
// The routing, settlement, bounds, faults and costs are described in
// docs/adapters/mem.md.
package mem
