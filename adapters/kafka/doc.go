// Package kafka is the sluice adapter for Apache Kafka and Kafka
// wire-protocol brokers, built on github.com/IBM/sarama: a driver
// (adapters/driver) under the portable layer (adapters/portable), which
// owns settlement, the "<topic>.dlq" and requeue copies, the delay
// fallback and the Errors channel.
//
// Kafka acknowledges by committing a partition offset, which acknowledges
// every earlier offset too. The driver hands out many records per
// partition at once, records each acknowledgement (in any order, no I/O)
// and commits only the contiguous prefix of acknowledged offsets: every
// [Options.CommitInterval], when [Options.CommitThreshold] offsets were
// recorded, when a rebalance revokes a partition, on Flush and on Stop. A
// crash redelivers what was recorded since the last commit, never loses
// it. Within a partition, records with the same non-empty key are handed
// out one at a time in offset order; requeue copies and rebalances can
// reorder a key, so Ordering is none.
//
// A logical topic T is the Kafka topic "<Namespace>.T"; LOAD_BALANCE uses
// the consumer group "<Namespace>.<Group>", BROADCAST one group per
// instance, "<Namespace>.<Group or T>.bcast.<Instance>". The tests run
// against github.com/twmb/franz-go/pkg/kfake (a wire-protocol peer, not
// Apache Kafka), or the cluster named by KAFKA_BROKERS.
package kafka
