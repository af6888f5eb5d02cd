module github.com/sluicemq/sluice

go 1.26

require (
	github.com/rabbitmq/amqp091-go v1.10.0
	go.uber.org/goleak v1.3.0
)
