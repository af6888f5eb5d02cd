// Package kafka is the sluice adapter for Apache Kafka and Kafka
// wire-protocol brokers, built on github.com/IBM/sarama with a Watermill
// publisher and subscriber on top (see [Adapter.Watermill]).
//
// # Settlement
//
// Kafka acknowledges by committing a partition offset, and an offset
// commit acknowledges every earlier offset of the partition too. The
// adapter therefore hands out many deliveries per partition at once,
// records each completion as it arrives (in any order) and commits only
// the contiguous prefix of completed offsets:
//
//	ACK          completion recorded; Settle returns (deferred acceptance)
//	REQUEUE      republished to the same topic (acks=all, idempotent
//	             producer) with sluice-redelivery-count+1, then recorded
//	DEAD_LETTER  published to "<topic>.dlq" with the reason headers
//	             (acks=all), then recorded
//
// Settle does not wait for the offset commit. One committer per
// subscription commits the recorded prefixes of every partition in one
// OffsetCommit request per round: every [Config.CommitInterval] (default
// 100ms), as soon as [Config.CommitThreshold] offsets (default 1000) were
// recorded since the last round, on Flush (ports.Flusher, which waits for
// the broker's answer), when a partition is revoked and on Stop. A crash
// redelivers what was recorded since the last successful round, never
// loses it. Commits carry the generation and member id of the
// consumer-group session that owns the partition and go over their own
// connections (not behind the consumer's Fetch long polls).
//
// When a partition is revoked in a rebalance (or the subscription stops)
// its recorded prefix is committed once more (best effort) and it is
// fenced: no commit for it is sent after that, and settling one of its
// deliveries returns [ErrRevoked]; the new owner redelivers it (at least
// once).
//
// # Ordering
//
// Within a partition, deliveries with the same non-empty key are handed
// out one at a time in offset order while other keys run in parallel. A
// requeue (republish to the tail of the partition) and a rebalance can
// reorder a key, so the adapter declares Ordering none.
//
// # Delay
//
// Kafka has no delayed delivery. Message.Delay and a Requeue's
// Disposition.Delay are written as an absolute "sluice-not-before"
// header; the consuming adapter holds such a record in the local
// scheduler (operators/schedule) until that time (the record stays
// uncommitted meanwhile). The producer's and consumer's clocks are assumed
// to agree.
//
// # Topics and groups
//
// A logical topic T maps to the Kafka topic "<Namespace>.T" and its dead
// letters to "<Namespace>.T.dlq". LOAD_BALANCE uses the consumer group
// "<Namespace>.<Group>"; BROADCAST uses a consumer group per instance,
// "<Namespace>.<Group or T>.bcast.<Instance>". A group joining a
// partition for the first time commits its starting offset (the end of
// the partition, or its start with [StartOldest]) so that messages sent
// while every instance is down are kept for it.
//
// # Test broker
//
// The package's tests run against github.com/twmb/franz-go/pkg/kfake, an
// in-process cluster that speaks the Kafka wire protocol. It is not
// Apache Kafka; set KAFKA_BROKERS to run the same tests against a real
// cluster.
package kafka
