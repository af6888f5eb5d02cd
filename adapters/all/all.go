// Package all registers every adapter of this module with adapters.Open,
// for programs that pick their broker at run time from a URL and accept
// linking every broker client:
//
//	import (
//		"github.com/sluicemq/sluice/adapters"
//		_ "github.com/sluicemq/sluice/adapters/all"
//	)
//
// A program that knows its brokers imports only their packages instead
// (each registers its own schemes when imported), and links only their
// clients (adapters/all links all nine, and the RocketMQ client's
// dependencies start an opencensus worker goroutine at init): _ "github.com/sluicemq/sluice/adapters/mem" for mem://,
// _ "github.com/sluicemq/sluice/adapters/amqp" for amqp:// and amqps://,
// and so on.
package all

import (
	_ "github.com/sluicemq/sluice/adapters/activemq"   // activemq://, activemq+ssl://
	_ "github.com/sluicemq/sluice/adapters/amqp"       // amqp://, amqps://
	_ "github.com/sluicemq/sluice/adapters/kafka"      // kafka://, kafka+tls://
	_ "github.com/sluicemq/sluice/adapters/kafkaqueue" // kafkaqueue://, kafkaqueues://
	_ "github.com/sluicemq/sluice/adapters/mem"        // mem://
	_ "github.com/sluicemq/sluice/adapters/mqtt"       // mqtt://, mqtt+embedded://, mqtts://
	_ "github.com/sluicemq/sluice/adapters/pulsar"     // pulsar://, pulsar+ssl://
	_ "github.com/sluicemq/sluice/adapters/redis"      // redis://, rediss://
	_ "github.com/sluicemq/sluice/adapters/rocketmq"   // rocketmq://
)
