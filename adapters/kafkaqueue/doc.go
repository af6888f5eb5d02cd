// Package kafkaqueue is the sluice adapter for Kafka share groups (KIP-932,
// "queues for Kafka"; Kafka 4.x with share groups enabled): URL schemes
// kafkaqueue:// and kafkaqueues:// (TLS). A LoadBalance group is a share
// group: each record is handed to one member at a time and settled on its
// own (ACK is Accept, REQUEUE Release, a dead letter a confirmed copy on
// "<topic>.dlq" then Reject); a record nobody settles comes back when its
// acquisition lock lapses, renewed while a handler holds it, up to
// Options.RenewFor. A Broadcast instance is a share group of its own.
//
// It speaks the share-group protocol over franz-go's request API, not
// through kgo.ShareGroup, whose poll accepts the records of the previous
// poll left unacknowledged. Records are those kafka:// writes and reads.
// docs/adapters/kafkaqueue.md has the settlement table, the options, the
// consume path and the limits.
package kafkaqueue
