package wmamqp_test

import (
	"log"
	"os"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/watermill/wmamqp"
)

// ExampleConfig lets an unmodified watermill-amqp service publish into
// sluice's "orders" topic (compiled, not run: it needs RabbitMQ).
func ExampleConfig() {
	cfg, err := wmamqp.Config(amqp.Options{URL: os.Getenv("AMQP_URL")}, "legacy-service")
	if err != nil {
		log.Fatal(err)
	}
	_ = cfg // wamqp.NewPublisher(cfg, logger), wamqp.NewSubscriber(cfg, logger)
}
