package mem_test

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

// Two adapters on one broker behave like two processes on one real broker.
func Example() {
	ctx := context.Background()
	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	producer, _ := mem.New(broker)
	consumer, _ := mem.New(broker)

	sub, _ := consumer.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	_ = producer.Send(ctx, ports.Message{Topic: "orders", Key: "o-1", Payload: []byte(`{"total":42}`)})

	ds, _ := sub.Receive(ctx, 10)
	for _, d := range ds {
		fmt.Printf("%s %s %s redelivery=%d\n", d.Topic, d.Key, d.Payload, d.RedeliveryCount)
	}
	_ = sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack})
	fmt.Println("ready:", broker.Stats().Queues[0].Ready, "in flight:", broker.Stats().Queues[0].InFlight)
	// Output:
	// orders o-1 {"total":42} redelivery=0
	// ready: 0 in flight: 0
}

// Requeue puts a message back with an exact redelivery count; DeadLetter
// moves it to "<topic>.dlq" with the reason.
func ExampleAdapter_Subscribe_settlement() {
	ctx := context.Background()
	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	a, _ := mem.New(broker)

	sub, _ := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	dlq, _ := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: ports.DeadLetterTopic("orders"), Group: "ops"})
	_ = a.Send(ctx, ports.Message{Topic: "orders", Payload: []byte("not json")})

	ds, _ := sub.Receive(ctx, 1)
	_ = sub.Settle(ctx, ds, ports.Disposition{Action: ports.Requeue, Reason: fmt.Errorf("db busy")})
	ds, _ = sub.Receive(ctx, 1)
	fmt.Println("redelivered, count", ds[0].RedeliveryCount)
	_ = sub.Settle(ctx, ds, ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poisonf("bad payload"), Attempts: 2})

	dead, _ := dlq.Receive(ctx, 1)
	h := dead[0].Headers
	fmt.Println(dead[0].Topic, h.Get(ports.HeaderDeadLetterReason), "attempts", h.Get(ports.HeaderAttempts))
	// Output:
	// redelivered, count 1
	// orders.dlq poison: bad payload attempts 2
}

// Stop hands unsettled deliveries back: the next consumer of the group
// gets them again, counted as redelivered.
func ExampleAdapter_Close() {
	ctx := context.Background()
	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	sender, _ := mem.New(broker)
	first, _ := mem.New(broker)

	sub, _ := first.Subscribe(ctx, ports.SubscriptionSpec{Topic: "jobs", Group: "workers"})
	_ = sender.Send(ctx, ports.Message{Topic: "jobs", Payload: []byte("job-1")})
	_, _ = sub.Receive(ctx, 1) // never settled
	_ = first.Close(ctx)       // a crash or a deploy: nothing is acked

	second, _ := mem.New(broker)
	sub2, _ := second.Subscribe(ctx, ports.SubscriptionSpec{Topic: "jobs", Group: "workers"})
	ds, _ := sub2.Receive(ctx, 1)
	fmt.Println(string(ds[0].Payload), "redelivery", ds[0].RedeliveryCount)
	// Output:
	// job-1 redelivery 1
}

// Broadcast gives every instance its own copy.
func ExampleBroker_Stats() {
	ctx := context.Background()
	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	a, _ := mem.New(broker)
	for _, inst := range []string{"node-a", "node-b"} {
		_, _ = a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "prices", Mode: ports.Broadcast, Group: "cache", Instance: inst})
	}
	_ = a.Send(ctx, ports.Message{Topic: "prices", Payload: []byte("1.25")})
	for _, q := range broker.Stats().Queues {
		fmt.Println(q.Topic, q.Mode, q.Instance, "ready", q.Ready)
	}
	// Output:
	// prices BROADCAST node-a ready 1
	// prices BROADCAST node-b ready 1
}

// Open uses the process-wide default broker: the embedded default for a
// service without an external broker. A namespace keeps tests apart.
func ExampleOpen() {
	ctx := context.Background()
	a, err := mem.Open(mem.WithNamespace("example-open"))
	if err != nil {
		panic(err)
	}
	defer a.Close(ctx)
	fmt.Println(a.Name(), a.Capabilities())
	// Output:
	// mem delay delayed-requeue native-dlq broadcast per-message-ack competing-consumers confirm native-batch expiry durable-groups exact-redelivery-count start-earliest single-active best-effort retention max-length ordering=none instance-guard=refused max-message-bytes=67108864
}
