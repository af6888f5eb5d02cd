// Package deadletter lets an operator work with a topic's dead letters on
// any broker: list them, show one, redrive a selection to its source topic
// (or another), purge a selection, and count them — each redrive and purge
// recorded in an audit trail, through the Port alone.
//
//	area, err := deadletter.New(adapter, "orders", "billing", deadletter.Options{})
//	entries, pass, err := area.List(ctx, deadletter.Filter{Reason: "negative total"})
//	res, err := area.Redrive(ctx, deadletter.Request{
//		Operator: "alice", Note: "fixed the total check in v1.4.2",
//		Filter:   deadletter.Filter{Reason: "negative total"},
//	})
//
// # Where it lives and why
//
// The package uses nothing but ports.Adapter (Send, Subscribe, Receive,
// Settle, DeclareTopic), so it works the same on every adapter and in
// tests on mem, and it imports no broker client. It sits under operators/
// beside operators/attempts and schedule, the other Port-level
// helpers, rather than in flow: a flow pipeline settles each delivery by
// its handler's outcome, while working a dead-letter area needs the
// opposite — the package itself chooses each delivery's disposition
// (leave it, redrive it, purge it) and must never hold more than one
// bounded batch.
//
// # The area
//
// A topic's dead letters are published to ports.DeadLetterTopic(topic)
// ("orders.dlq") by every adapter, with the reason, source topic and
// attempts in headers. An [Area] reads them through one LoadBalance group
// on that topic. On brokers whose groups keep only what is published after
// the group exists (mem, RabbitMQ, ActiveMQ, MQTT) that group must be
// declared before the dead letters arrive: [Declare] does it, with a
// retention bound, next to the application's own topology. Where the
// broker keeps the log (Kafka, Redis Streams, Pulsar) a new group starts
// at the earliest retained dead letter.
//
// The dead-letter copy does not say which group of the source topic
// failed it, and the Port cannot address one group: a redrive to the
// source topic reaches every group of that topic again. Handlers are
// idempotent by ce-id (which a redrive keeps), so the other groups see a
// duplicate, never a loss.
//
// # What "list" means over a Port
//
// The Port's only read is Receive followed by Settle: there is no browse.
// A pass therefore receives the area one bounded batch at a time (at most
// Options.Batch deliveries held at once) and settles every batch before
// it receives the next. A delivery it leaves in the area is settled with
// Requeue, which puts it back behind the others, so the pass moves on to
// the rest. A message the pass put back and receives again (it went
// round) is held, not put back again at once, and the pass goes on: on a
// topic of several streams (Kafka partitions, RocketMQ queues) one
// stream's copies can come round before another stream's first message,
// so only time shows that nothing is left. A pass ends when it
//
//   - went round, then received nothing new for Options.Idle, or held a
//     full window (Options.Batch) of what went round twice with nothing
//     new in between ("wrapped"; what it holds goes back at the end),
//   - waits Options.Idle with nothing to receive ("idle"; the first
//     receive of a pass waits Options.FirstWait, for a group join), or
//   - examined Options.Limit deliveries ("limit": the listing is partial).
//
// The cost is honest: listing changes the area's order and raises each
// dead letter's redelivery count by one or two on every pass (the count that
// matters, sluice-attempts, is a header and does not change); a pass is as
// long as the area, or Limit; and on an area consumed by something else at
// the same time (a dead-letter receiver) a pass sees only its share; a
// pass lasts at least Options.Idle. Two copies of one message (the same
// ce-id, dead-lettered twice) are listed once. A broker-native browse (a
// RabbitMQ get-with-requeue, a Kafka offset read) would avoid the requeues but is broker-specific; the Port
// has none, and this package does not reach behind it.
//
// # Redrive and purge
//
// A redrive or purge makes two passes. The first selects (by [Filter]),
// refuses what was already redriven Options.MaxRedrives times (unless
// forced), and writes the audit [Record] — before any message moves, so
// that even a redrive killed midway has its record. The second pass takes
// exactly the selected ids; when it ends without some of them (a message
// the first pass put back that is not visible again yet, as on a broker
// whose put-back keeps it invisible for a while) and it found others, it
// passes again, at most [MaxTakePasses] times in all, each waiting up to
// Options.FirstWait for its first message; what is still not found is
// reported as Result.Missing. For a redrive it sends each batch's copies and
// waits for the broker's confirm, and only then acknowledges their
// dead-letter copies. A crash between the two duplicates at most one batch
// (the copies were sent, the originals come back to the area); it never
// loses one. A copy whose send was not confirmed is put back in the area.
//
// A redriven copy keeps the message's ce-id, key, payload and headers,
// loses the dead-letter headers (reason, source topic, attempts), and
// carries [HeaderRedriveCount] and [HeaderRedriveAudit].
//
// # Audit
//
// Every redrive, purge and payload reveal writes one JSON [Record] (who,
// when, what, why) to the area's audit topic ("<topic>.dlq.audit", read
// by the group [AuditGroup]) and logs it as a slog record. The operator
// name and the note are required.
//
// # Retention
//
// [Declare] bounds the area through the topic registry
// (ports.DeclareTopic): [DefaultRetention] is 14 days and 100,000
// messages per group, each applied where the adapter declares
// Capabilities.Retention or Capabilities.MaxLength and reported (and
// logged) as not enforced elsewhere. [Area.Stats] logs a warning when the
// area holds Options.AlertAt (default 1,000) messages or more.
package deadletter
