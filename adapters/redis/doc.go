// Package redis is sluice's Redis Streams adapter, built on go-redis v9:
// a driver (adapters/driver) under the portable layer (adapters/portable).
//
// A topic is a stream, a LoadBalance group a consumer group, a Broadcast
// instance a group of its own. Receive reads a consumer's own pending
// entries first (a restart under the same Options.Consumer), claims the
// entries other consumers left idle for ClaimMinIdle (XAUTOCLAIM, with
// their exact delivery count), then reads new ones (XREADGROUP). An ack
// is one XACK per settlement round; a requeue shapes the entry's idle
// time (or, for a delay of ClaimMinIdle or more, stores a counted copy in
// the delayed set); a dead letter is the portable layer's confirmed copy
// to "<topic>.dlq", then XACK. Delayed messages wait in a sorted set moved
// by an atomic Lua script. go-redis's process-wide logger is replaced
// once, by the first New, with one that writes to the adapter's logger.
// See docs/adapters/redis.md for the mapping and its limits (single
// server or primary with replicas, not Redis Cluster).
package redis
