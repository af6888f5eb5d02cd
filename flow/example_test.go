package flow_test

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func ExampleCompletion_Split() {
	parent := flow.NewCompletion(func(o flow.Outcome) { fmt.Println("input settled:", o.Kind) })
	parts := parent.Split(2)
	_ = parts[0].Succeed()
	fmt.Println("one part done")
	_ = parts[1].Fail(ports.Poisonf("bad line"))
	// Output:
	// one part done
	// input settled: poisoned
}

func ExampleJoin() {
	member := func(name string) *flow.Completion {
		return flow.NewCompletion(func(o flow.Outcome) { fmt.Println(name, o.Kind) })
	}
	batch := flow.Join(member("a"), member("b"))
	_ = batch.Succeed()
	// Output:
	// a succeeded
	// b succeeded
}

func ExampleNewMessage() {
	ctx := flow.WithRequestID(context.Background(), "req-7")
	m, err := flow.NewMessage(ctx, "orders", order{ID: "o-1", Total: 12}, flow.Key("customer-9"))
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Topic, m.Key, string(m.Payload), m.Headers.Get(ports.HeaderRequestID), m.Headers.Get(ports.HeaderContentType))
	// Output: orders customer-9 {"id":"o-1","total":12} req-7 application/json
}

// A CloudEvent in binary content mode: the attributes CloudEvents requires
// travel as ce-* headers, written only when asked.
func ExampleCloudEvents() {
	ce := flow.CloudEvents("https://orders.example.com")
	m, err := flow.NewMessage(context.Background(), "orders", order{ID: "o-1", Total: 12}, ce, flow.Type("com.example.order.placed.v1"))
	if err != nil {
		panic(err)
	}
	for _, h := range []string{ports.HeaderSpecVersion, ports.HeaderSource, ports.HeaderType, ports.HeaderContentType} {
		fmt.Println(h, m.Headers.Get(h))
	}
	// Output:
	// ce-specversion 1.0
	// ce-source https://orders.example.com
	// ce-type com.example.order.placed.v1
	// content-type application/json
}

func ExamplePipeline() {
	broker, _ := mem.NewBroker()
	defer broker.Close(context.Background())
	adapter, _ := mem.New(broker)
	ctx := context.Background()

	p := flow.New(adapter, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	orders := flow.Decode[order](p.Source())
	done := make(chan struct{})
	flow.Sink(orders, func(ctx context.Context, o order) error {
		fmt.Println("billing", o.ID, "for", o.Total, "request", flow.RequestID(ctx))
		close(done)
		return nil // success: the delivery is acked
	})
	if err := p.Start(ctx); err != nil {
		panic(err)
	}
	_ = flow.Send(flow.WithRequestID(ctx, "req-1"), adapter, "orders", order{ID: "o-1", Total: 42})
	<-done
	_ = p.Stop(ctx) // waits for the ack, then stops
	fmt.Printf("%+v\n", p.Stats())
	// Output:
	// billing o-1 for 42 request req-1
	// {Received:1 Acked:1 Requeued:0 DeadLettered:0 Cancelled:0 Unsettled:0 Filtered:0 SettleErrors:0 Conflicts:0 Errors:0 InFlight:0 SettleCalls:1}
}
