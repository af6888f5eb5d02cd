package pulsar_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/internal/fakepulsar"
	"github.com/sluicemq/sluice/ports"
)

// The examples run over fakepulsar, a model of the client interfaces; in
// production pass pulsar.Options{URL: "pulsar://host:6650"} instead.
func ExampleNew() {
	broker := fakepulsar.New()
	defer broker.Close()
	client := broker.NewClient()
	defer client.Close()

	a, err := pulsar.New(context.Background(), pulsar.Options{Client: client, Tenant: "acme", Namespace: "orders", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer a.Close(context.Background())
	fmt.Println(a.PhysicalTopic("orders.paid"))
	fmt.Println(a.Capabilities())
	// Output:
	// persistent://acme/orders/orders.paid
	// delay -delayed-requeue -native-dlq broadcast per-message-ack confirm -native-batch -expiry durable-groups -exact-redelivery-count start-earliest -single-active best-effort -retention -max-length ordering=none instance-guard=refused max-message-bytes=5177344
}

func Example_settle() {
	broker := fakepulsar.New()
	defer broker.Close()
	client := broker.NewClient()
	defer client.Close()
	a, _ := pulsar.New(context.Background(), pulsar.Options{Client: client, RequeueTick: 9 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	defer a.Close(context.Background())
	ctx := context.Background()

	sub, _ := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	_ = a.Send(ctx, ports.Message{Topic: "orders", Payload: []byte(`{"total":42}`), Headers: ports.NewHeaders(ports.HeaderID, "order-1")})

	ds, _ := sub.Receive(ctx, 1)
	fmt.Println(ds[0].ID, "delivery", ds[0].RedeliveryCount)
	// The handler failed: requeue. Pulsar redelivers with its own count
	// (a negative ack), after the delay the portable layer holds.
	_ = sub.Settle(ctx, ds, ports.Disposition{Action: ports.Requeue, Reason: errors.New("busy"), Delay: 10 * time.Millisecond})
	ds, _ = sub.Receive(ctx, 1)
	fmt.Println(ds[0].ID, "delivery", ds[0].RedeliveryCount)
	// It succeeded: acknowledge.
	_ = sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack})
	fmt.Println("unacked:", len(broker.Unacked("persistent://public/default/orders", "billing")))
	// Output:
	// order-1 delivery 0
	// order-1 delivery 1
	// unacked: 0
}
