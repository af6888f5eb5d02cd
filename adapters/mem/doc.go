// Package mem is sluice's in-process adapter: a real message broker inside
// the process ([Broker]), the embedded default (mem://) for services and
// tests that need no external broker, and the reference driver under the
// portable layer: it declares every capability except ordering and runs
// every TCK case. Each [Adapter] made on a Broker with [New] is one
// "process" connected to it; [Open] uses the process-wide [Default].
// Routing, settlement, bounds, time, faults and costs are described in
// docs/adapters/mem.md.
package mem
