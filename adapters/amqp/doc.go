// Package amqp is sluice's RabbitMQ adapter (AMQP 0-9-1, on
// github.com/rabbitmq/amqp091-go): a driver under the portable layer
// (adapters/portable). docs/adapters/amqp.md describes its topology,
// settlement, delays, failures and options.
//
//	a, err := amqp.New(ctx, amqp.Options{URL: "amqp://guest:guest@127.0.0.1:5672/"})
package amqp
