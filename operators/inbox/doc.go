// Package inbox makes a handler's effect exactly once when the effect is
// a write to a SQL database: a transactional inbox.
//
// Deliveries arrive at least once on every broker. Sink runs the
// handler's writes and an "already processed" record of the delivery's
// identity (ports.Delivery.ID) in one database transaction, and acks the
// delivery only after that transaction committed. A redelivery — after a
// crash between the commit and the ack, a lost ack, a requeue — finds the
// record and is acked without running the handler again.
//
//	ib, err := inbox.New(ctx, db, inbox.Options{})
//	p := flow.New(adapter, ports.SubscriptionSpec{Topic: "orders", Group: "billing", QoS: ports.ExactlyOnce})
//	inbox.Sink(flow.Decode[Order](p.Source()), ib, func(ctx context.Context, tx *sql.Tx, o Order) error {
//		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id, total) VALUES ($1, $2)`, o.ID, o.Total)
//		return err
//	})
//	err = p.Run(ctx)
//
// # Guarantee
//
// For every message with an identity, the handler's committed writes
// happen once, however often the message is delivered, on any adapter:
// the transport stays at least once and the effect is exactly once. A
// pipeline built with QoS ports.ExactlyOnce starts only when its sinks
// keep that promise (flow.ExactlyOnceEffect).
//
// # Limits
//
//   - Only writes made through the given *sql.Tx are exactly once. An HTTP
//     call, an email or a message sent from the handler is at least once:
//     the handler may run again after a failed or rolled-back attempt.
//   - The effect must live in the same database as the inbox table.
//   - The delivery needs an identity: a producer id (ports.HeaderID, set
//     by every sluice producer) or a broker identity. A delivery without
//     one is dead-lettered unless Options.WithoutIdentity says otherwise.
//   - The table grows by one row per message: Purge bounds it, and a
//     message redelivered after its row was purged is handled again.
//
// docs/exactly-once.md is the guide.
//
// # Databases
//
// database/sql with SQLite (modernc.org/sqlite, mattn/go-sqlite3) or
// PostgreSQL (pgx's stdlib driver, lib/pq); the dialect is detected from
// the driver, or set with Options.Dialect.
package inbox
