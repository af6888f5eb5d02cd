// Package activemq is sluice's adapter for ActiveMQ Classic (certified
// against ActiveMQ 5.17), over STOMP 1.2 with go-stomp:
//
//	a, err := activemq.New(ctx, activemq.Options{Addr: "127.0.0.1:61613"})
//	// or adapters.Open(ctx, "activemq://127.0.0.1:61613?namespace=billing")
//
// It is a driver (adapters/driver) under the portable layer
// (adapters/portable). docs/adapters/activemq.md describes its mapping of
// topics, groups, settlement and delays; package activemqtest starts a
// private broker for tests.
package activemq
