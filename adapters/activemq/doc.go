// Package activemq is sluice's adapter for ActiveMQ Classic (certified
// against ActiveMQ 5.17), over STOMP 1.2 with go-stomp.
//
//	a, err := activemq.New(ctx, activemq.Options{Addr: "127.0.0.1:61613"})
//	// or adapters.Open(ctx, "activemq://127.0.0.1:61613?namespace=billing")
//
// The package is a driver (adapters/driver) under the portable layer
// (adapters/portable), which owns settlement, copies, the in-flight bound
// and reconnect backoff. Every logical topic is a virtual topic: a send is
// a STOMP transaction committed with a receipt, a LOAD_BALANCE group
// consumes its queue Consumer.<group>.VirtualTopic.<ns>.<topic> with
// ack:client-individual, a BROADCAST instance a queue of its own. A
// requeue is a confirmed copy to the subscription's own queue, a dead
// letter a confirmed copy to the "<topic>.dlq" queue; delays are
// AMQ_SCHEDULED_DELAY (schedulerSupport="true" on the broker). See
// docs/adapters/activemq.md; package activemqtest starts a private broker
// for tests.
package activemq
