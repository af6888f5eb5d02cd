// Package pulsar is the sluice adapter for Apache Pulsar, built on
// github.com/apache/pulsar-client-go (v0.19.0): a driver under the
// portable layer (adapters/portable), which owns the settlement rules,
// held delays, dead-letter copies and the Errors channel.
//
//	a, err := pulsar.New(ctx, pulsar.Options{URL: "pulsar://127.0.0.1:6650"})
//
// or with a client you built yourself, which the adapter never closes:
//
//	a, err := pulsar.New(ctx, pulsar.Options{Client: client})
//
// The URL opener (pulsar://, pulsar+ssl://) also checks the broker with
// the binary protocol's CONNECT before it returns.
//
// This adapter is NOT certified against a real Pulsar broker on the
// project's machines. The TCK runs with the real client against
// pulsartest (a wire-protocol test broker), against internal/fakepulsar,
// and against a real Pulsar when PULSAR_URL is set.
//
// # Mapping
//
// Topic T is "persistent://<tenant>/<namespace>/<prefix>T"; best-effort
// messages travel on its non-persistent twin. LoadBalance is one Shared
// subscription named after the group; each Broadcast instance has a Shared
// subscription "<group>.<instance>" of its own (Exclusive and Failover
// subscriptions keep no redelivery count), guarded by an Exclusive probe.
//
//	Ack          AckID / AckIDList with AckWithResponse, one command per round
//	Requeue      NackID: redelivered with the broker's count after RequeueTick;
//	             a longer Disposition.Delay is held by the portable layer first
//	DeadLetter   a confirmed copy to "T.dlq", then the ack
//	Stop         consumer Close (Unsubscribe first for a Broadcast instance
//	             without InstanceTTL): never an ack
//
// The redelivery count lives in broker memory and is reset when the last
// consumer leaves or the broker restarts: a lower bound. A delayed message
// is sent with DeliverAfter and the not-before header, which the portable
// layer checks. The client's DLQPolicy is not used: it would dead-letter
// on its own, drop the reason, and ack the original unseen. Chunking
// (Options.Chunking) carries messages above the broker's limit.
//
// For Watermill, use adapters/watermill over the Adapter.
package pulsar
