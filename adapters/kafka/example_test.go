package kafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
)

// A send, a delivery and its settlement on an in-process kfake cluster (a
// Kafka wire-protocol peer, not Apache Kafka).
func ExampleNew() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	a, err := kafka.New(ctx, kafka.Options{Brokers: cluster.ListenAddrs(), HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second})
	if err != nil {
		panic(err)
	}
	defer a.Close(context.Background())
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	if err != nil {
		panic(err)
	}
	defer sub.Stop(context.Background())

	if err := a.Send(ctx, ports.Message{Topic: "orders", Key: "order-1", Payload: []byte(`{"total":42}`)}); err != nil {
		panic(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(ds[0].Key, string(ds[0].Payload), ds[0].RedeliveryCount)
	// Ack returns once the broker accepted the offset commit.
	fmt.Println(sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}))
	// Output:
	// order-1 {"total":42} 0
	// <nil>
}
