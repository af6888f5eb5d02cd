package amqp_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/adapters/amqp"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// These examples need a RabbitMQ broker, so they are compiled but not run
// (no Output comment); the tests run the same paths against a real node.

// Example: a confirmed send and a pipeline whose handler's result settles
// each delivery.
func Example() {
	ctx := context.Background()
	a, err := amqp.New(ctx, amqp.Options{URL: os.Getenv("AMQP_URL")})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close(ctx)

	type order struct{ ID string }
	p := flow.New(a, ports.SubscriptionSpec{Topic: "orders", Group: "billing", InFlight: 64})
	flow.Sink(flow.Decode[order](p.Source()), func(ctx context.Context, o order) error {
		fmt.Println("billing", o.ID) // nil acks; an error requeues (counted, bounded); poison dead-letters
		return nil
	})
	if err := p.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer p.Stop(ctx)
	if err := flow.Send(ctx, a, "orders", order{ID: "o-1"}); err != nil {
		log.Fatal(err) // not confirmed by the broker
	}
}

// Example_watermill runs a Watermill router on the adapter through the
// shared bridge (adapters/watermill).
func Example_watermill() {
	ctx := context.Background()
	a, err := amqp.New(ctx, amqp.Options{URL: os.Getenv("AMQP_URL")})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close(ctx)
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	sub := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "shipping", InFlight: 16, NackDelay: time.Second})
	pub := wmbridge.NewPublisher(a)
	router.AddHandler("ship", "orders", sub, "shipments", pub, func(m *message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage(watermill.NewUUID(), m.Payload)}, nil
	})
	_ = router.Run(ctx)
}
