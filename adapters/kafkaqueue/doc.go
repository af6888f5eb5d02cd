// Package kafkaqueue is the sluice adapter for Kafka share groups (KIP-932,
// "queues for Kafka"; Kafka 4.x with share groups enabled): URL schemes
// kafkaqueue:// and kafkaqueues:// (TLS). A LoadBalance group is a share
// group: each record is handed to one member at a time, any number of
// members share a partition, and each record is settled on its own —
// ACK is Accept, REQUEUE is Release (the broker counts the delivery), a
// dead letter is a confirmed copy on "<topic>.dlq" then Reject, and a
// record nobody settles comes back when its acquisition lock lapses. The
// adapter renews the lock of a record a slow handler holds, up to
// Options.RenewFor. A Broadcast instance is a share group of its own.
//
// It speaks the share-group protocol (ShareGroupHeartbeat, ShareFetch,
// ShareAcknowledge) over franz-go's request API rather than through
// kgo.ShareGroup: franz-go's share consumer accepts every record of a poll
// left unacknowledged when the next poll starts, and sluice pulls again
// while records are still with their handlers. Records are Kafka records
// as kafka:// writes and reads them (the same topics, key, headers and
// identity), so both adapters read each other's messages.
//
// docs/adapters/kafkaqueue.md has the settlement table, the options and
// the limits. The tests run against kfake, franz-go's in-process Kafka
// wire-protocol peer, not Apache Kafka.
package kafkaqueue
