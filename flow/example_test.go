package flow_test

import (
	"context"
	"fmt"

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
	fmt.Println(m.Topic, m.Key, string(m.Payload), m.Headers[ports.HeaderRequestID], m.Headers[ports.HeaderType])
	// Output: orders customer-9 {"id":"o-1","total":12} req-7 flow_test.order
}
