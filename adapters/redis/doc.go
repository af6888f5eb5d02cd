// Package redis is sluice's Redis Streams adapter, built on go-redis v9.
//
// # Mapping
//
//   - Topic t → stream "<ns>:stream:<t>"; its dead-letter topic t.dlq is
//     the stream "<ns>:stream:<t>.dlq", consumed like any other.
//   - Entry: field "payload", field "key" (partition key, when set), one
//     field "h:<name>" per header.
//   - Send: pipelined XADD, confirmed per entry by Redis' answer, plus the
//     durability level (Options.Durability): fsync (default; the server must
//     run appendonly yes + appendfsync always, checked at New), none, or
//     replicas (WAIT n on the same connection).
//   - LOAD_BALANCE: one consumer group named SubscriptionSpec.Group,
//     created at the stream's end on first Subscribe and kept while no
//     instance runs (durable groups). BROADCAST: one group per instance,
//     "bc:<group>:<instance>".
//   - Receive: XREADGROUP … COUNT <free in-flight slots> BLOCK, and every
//     ClaimInterval an XAUTOCLAIM (Lua, with the exact times_delivered of
//     each claimed entry from XPENDING) of entries idle for ClaimMinIdle:
//     the entries of a crashed consumer, released and requeued ones. A live
//     consumer renews the idle time of what it holds every ClaimMinIdle/3.
//   - RedeliveryCount = times_delivered − 1 (+ the sluice-redelivery-count
//     header of a requeued copy, below): exact.
//   - ACK: one XACK per Settle batch (done when Settle returns).
//   - REQUEUE with delay d < ClaimMinIdle: the entry stays pending;
//     XCLAIM … IDLE (ClaimMinIdle−d) JUSTID shapes its idle time so
//     XAUTOCLAIM hands it out again after d (and counts the delivery).
//     d ≥ ClaimMinIdle: a copy with the count in its header goes to the
//     delayed set and the original is acknowledged, in one Lua step.
//   - DEAD_LETTER: MULTI { XADD <t>.dlq (reason, attempts, original topic
//     headers); XACK } — the dead-letter entry and the removal of the
//     original commit together or not at all. When the EXEC's answer is
//     lost with its connection, the adapter asks (XPENDING, on a fresh
//     connection) whether the originals are still pending: gone, the step
//     ran and Settle succeeds; still pending, Settle fails and they come
//     back. The delayed requeue's Lua step is checked the same way.
//   - No settlement: the entry stays in the pending entries list. Stop
//     sets the idle time of what it held to ClaimMinIdle, so the next
//     consumer's XAUTOCLAIM takes it at once; a crashed consumer's entries
//     are claimed after ClaimMinIdle.
//   - Delayed message (Message.Delay): stored durably at Send in a hash
//     plus the sorted set "<ns>:delayed" scored by the server's TIME + delay;
//     every adapter runs an atomic Lua mover every DelayPoll that XADDs due
//     messages to their streams. A delayed message survives the sender's
//     crash (unlike a local scheduler).
//   - Instance expiry (Redis has no TTL on groups): a broadcast instance
//     keeps a heartbeat key "<ns>:hb:<stream>:<group>" with a PX TTL
//     (SubscriptionSpec.InstanceTTL, or Options.InstanceTTL when the
//     instance dies without stopping), renewed every TTL/3. A stopped
//     instance with InstanceTTL zero destroys its group at once; with a TTL
//     it leaves the key to expire. An instance that resubscribes after its
//     heartbeat expired finds its group destroyed and starts at the
//     stream's end; every adapter's janitor destroys, every
//     JanitorInterval, the broadcast groups of its streams whose heartbeat
//     is gone.
//
// # Limits
//
// Single server or primary with replicas: the Lua scripts name keys
// outside KEYS (Redis Cluster is not supported). Streams are not trimmed
// by the adapter: trim with XTRIM MINID below every group's oldest pending
// entry, or let your retention policy do it. Ordering is not guaranteed
// (competing consumers and requeues).
package redis
