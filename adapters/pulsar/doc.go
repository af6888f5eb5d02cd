// Package pulsar is the sluice adapter for Apache Pulsar, built on
// github.com/apache/pulsar-client-go (v0.19.0).
//
// Select it with a "pulsar://" or "pulsar+ssl://" URL:
//
//	a, err := pulsar.New(ctx, pulsar.WithURL("pulsar://127.0.0.1:6650"))
//
// or inject a client you built yourself (the adapter then never closes it):
//
//	a, err := pulsar.New(ctx, pulsar.WithClient(client))
//
// # Certification
//
// This adapter is NOT certified against a real Pulsar broker on the
// project's machines: no Pulsar server runs there. Its settlement mapping is
// proven against an in-process model of the client interfaces
// (internal/fakepulsar), and the full TCK runs against a real Pulsar when
// PULSAR_URL is set (see docs/adapters/pulsar.md).
//
// # Topics and subscriptions
//
// A logical topic T maps to the persistent topic
// "persistent://<tenant>/<namespace>/<prefix>T" (defaults: tenant "public",
// namespace "default", no prefix); its dead-letter topic is the mapping of
// "T.dlq". LOAD_BALANCE uses one Shared subscription named after the group;
// BROADCAST uses one subscription per instance, named "<group>.<instance>",
// also of type Shared (see below for why not Exclusive).
//
// # Settlement
//
//	ACK          AckID / AckIDList with AckWithResponse: returns once the broker answered
//	REQUEUE      Nack(msg) (NackID by every chunk for a chunked message); the broker
//	             redelivers with RedeliveryCount+1 after Disposition.Delay
//	DEAD_LETTER  confirmed publish of a copy to the dead-letter topic, then ack; a failed
//	             publish leaves the original unacknowledged
//	stop         consumer Close (and, for a BROADCAST instance without InstanceTTL,
//	             Unsubscribe): never an ack; the broker redelivers what was unacked
//
// Disposition.Delay is honoured per message although the client's nack delay
// is per consumer: the adapter installs its own NackBackoffPolicy, which the
// client consults synchronously inside Nack(msg), and serialises Nack calls
// so that each one sees its own delay. Redelivery is at the first tick of
// the client's nack tracker after the delay (WithRequeueTick), never before.
//
// Pulsar's redelivery count lives in broker memory: exact while a
// subscription keeps a connected consumer, cleared when the last one leaves
// or the broker restarts. Capabilities therefore declare it a lower bound.
//
// A broker with delayedDeliveryDeliverAtTimeStrict=false (the default) may
// dispatch a delayed message up to a tick early; the publisher writes
// NotBeforeProperty and Receive holds such a message until then.
//
// The client's DLQPolicy is not used: it dead-letters on its own when a
// redelivery count is reached (the adapter must never decide an outcome),
// it drops the reason, and it acknowledges the original from a background
// goroutine whose error nobody sees.
//
// # Large payloads
//
// Send refuses a message above Capabilities.MaxMessageBytes (MaxMessageBytes,
// a stock broker's limit less room for the metadata) with a
// *ports.SizeError. WithChunking (URL chunking=true) sends a larger one in
// chunks, up to MaxChunkedMessageBytes (64 MiB); a message reassembled from
// chunks is acked, requeued and dead-lettered whole. Use it only where each
// subscription has one consumer: the chunks of one message can be split
// across the consumers of a Shared subscription (see WithChunking).
//
// # Why BROADCAST uses Shared, not Exclusive, subscriptions
//
// On an Exclusive (or Failover) subscription Pulsar does not track redelivery
// counts (always 0), turns a negative ack of one message into a rewind of
// every unacknowledged message, and ignores deliver-after. Each BROADCAST
// instance therefore gets its own subscription of type Shared: it alone
// consumes it, and the subscription keeps per-message nacks, counts and
// delays. Pulsar would let two processes started with the same
// SubscriptionSpec.Instance share it; the adapter probes the subscription
// with an Exclusive consumer first, which the broker refuses while a
// consumer is connected, and refuses the second Subscribe (a detection,
// not a lock: see docs/adapters/pulsar.md).
//
// # Watermill
//
// Publishing goes through this package's Watermill message.Publisher
// ([Publisher]), used by Send and by dead-lettering. [Subscriber] is a
// Watermill message.Subscriber over the same client for plain Watermill
// use (a Watermill router can run over Publisher and Subscriber). The sluice
// Subscription consumes with the client directly: a Watermill message's
// Ack and Nack cannot carry a broker error back, a requeue delay, or a
// dead-letter route, and a Watermill router decides acks from a handler's
// return value, while sluice settles only what the core's completion says.
package pulsar
