package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/adapters/amqp"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

// TestWatermillRouterOverAdapter runs a Watermill router on the adapter:
// a handler that fails a message's first attempt makes the router nack
// it, the adapter requeues it with its redelivery count (visible in the
// metadata), the second attempt succeeds and its output is published with
// confirms; every input is acked exactly once.
func TestWatermillRouterOverAdapter(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	in := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "invoicing", InFlight: 8})
	check := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "check"})
	pub := wmbridge.NewPublisher(a)
	defer in.Close()
	defer check.Close()
	if err := in.SubscribeInitialize("orders"); err != nil {
		t.Fatal(err)
	}
	if err := check.SubscribeInitialize("invoices"); err != nil {
		t.Fatal(err)
	}

	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	attempts := map[string][]string{} // order id -> redelivery counts seen
	router.AddHandler("invoice", "orders", in, "invoices", pub, func(msg *message.Message) ([]*message.Message, error) {
		count := msg.Metadata.Get(ports.HeaderRedeliveryCount)
		mu.Lock()
		attempts[msg.UUID] = append(attempts[msg.UUID], count)
		mu.Unlock()
		if count == "" {
			return nil, errors.New("first attempt fails")
		}
		out := message.NewMessage(watermill.NewUUID(), append([]byte("invoice for "), msg.Payload...))
		out.Metadata.Set("order", msg.UUID)
		return []*message.Message{out}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	<-router.Running()

	const n = 10
	for i := range n {
		if err := pub.Publish("orders", message.NewMessage(fmt.Sprintf("order-%d", i), []byte(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
	}
	invoices, err := check.Subscribe(ctx, "invoices")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case m := <-invoices:
			seen[m.Metadata.Get("order")] = true
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("%d of %d invoices arrived", len(seen), n)
		}
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("order-%d", i)
		if got := fmt.Sprint(attempts[id]); got != "[ 1]" {
			t.Errorf("order %s: redelivery counts seen %s, want [ 1] (first attempt, then one requeue)", id, got)
		}
	}
}
