package pulsartest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
)

// A test starts the broker, points a plain client at its URL, and inspects
// the broker's state afterwards.
func Example() {
	b, err := pulsartest.Start()
	if err != nil {
		panic(err)
	}
	defer b.Close()

	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: b.URL(), Logger: log.DefaultNopLogger(), MetricsRegisterer: prometheus.NewRegistry(),
	})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	cons, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic: "orders", SubscriptionName: "billing", Type: pulsar.Shared, AckWithResponse: true,
	})
	if err != nil {
		panic(err)
	}
	defer cons.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "orders"})
	if err != nil {
		panic(err)
	}
	defer prod.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("order-1"), Key: "customer-7"}); err != nil {
		panic(err)
	}
	m, err := cons.Receive(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(m.Payload()), m.Key(), m.RedeliveryCount())
	if err := cons.Ack(m); err != nil {
		panic(err)
	}
	st, _ := b.Subscription("orders", "billing")
	fmt.Println(st.Type, "backlog", st.Backlog)
	// Output:
	// order-1 customer-7 0
	// Shared backlog 0
}

// Fault hooks decide what happens to the next SENDs: here the first one is
// refused, and the client's own retry stores the message once.
func ExampleBroker_FailNextSends() {
	b, err := pulsartest.Start()
	if err != nil {
		panic(err)
	}
	defer b.Close()
	client, err := pulsar.NewClient(pulsar.ClientOptions{
		URL: b.URL(), Logger: log.DefaultNopLogger(), MetricsRegisterer: prometheus.NewRegistry(),
	})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: "t", DisableBatching: true})
	if err != nil {
		panic(err)
	}
	defer prod.Close()

	b.FailNextSends(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		panic(err)
	}
	st, _ := b.Topic("t")
	c := b.Counters()
	fmt.Println("stored", st.Entries, "refused", c.FailedSends, "received", c.Sends)
	// Output:
	// stored 1 refused 1 received 2
}
