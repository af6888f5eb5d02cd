// Package activemq is sluice's adapter for ActiveMQ Classic (certified
// against ActiveMQ 5.17), over STOMP 1.2 with go-stomp.
//
//	a, err := activemq.New(ctx, activemq.Options{Addr: "127.0.0.1:61613"})
//	// or adapters.Open(ctx, "activemq://127.0.0.1:61613?namespace=billing")
//
// Every logical topic is a virtual topic: Send publishes to
// /topic/VirtualTopic.<ns>.<topic> in a STOMP transaction committed with
// a receipt (persistent messages), a LOAD_BALANCE group consumes the queue
// Consumer.<group>.VirtualTopic.<ns>.<topic> with ack:client-individual
// and activemq.prefetchSize = InFlight, and a BROADCAST instance a queue of
// its own. Requeue and dead letter send a copy (with the redelivery count
// + 1 and AMQ_SCHEDULED_DELAY, or to the "<topic>.dlq" queue) in a
// transaction committed with a receipt, and acknowledge the original only
// after that receipt. Delays need the broker's scheduler
// (schedulerSupport="true").
//
// See Adapter.Capabilities for what is native and docs/adapters/activemq.md
// for the mapping, the broker configuration and the measurements. Package
// activemqtest starts a private broker for tests.
package activemq
