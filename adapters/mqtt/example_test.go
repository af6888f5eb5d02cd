package mqtt_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/ports"
)

// An adapter on the in-process development broker: subscribe as a member
// of a group, send with a confirm, receive and acknowledge (PUBACK).
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := mqtt.New(ctx, mqtt.Options{Embedded: true, Instance: "pod-0", Logger: quietLog})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close(context.Background())

	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders.paid", Group: "billing"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := a.Send(ctx, ports.Message{Topic: "orders.paid", Key: "order-42", Payload: []byte(`{"total":12}`)}); err != nil {
		fmt.Println(err)
		return
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	d := ds[0]
	fmt.Println(d.Topic, d.Key, string(d.Payload), d.RedeliveryCount)
	fmt.Println(sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}))
	// Output:
	// orders.paid order-42 {"total":12} 0
	// <nil>
}
