package mqtt_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/ports"
)

// TestWatermillRouter runs a Watermill router over the adapter's
// publisher/subscriber pair: a handler that nacks a message's first
// delivery sees it again with its redelivery count in the metadata, and an
// acked message is not redelivered.
func TestWatermillRouter(t *testing.T) {
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := mqtt.New(ctx, mqtt.Options{URL: b.URL(), ReceiveMaximum: 65535, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())

	sub := a.WatermillSubscriber(mqtt.WatermillConfig{Spec: ports.SubscriptionSpec{Group: "wm", InFlight: 4}})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		uuid, count, tenant string
	}
	got := make(chan seen, 16)
	var mu sync.Mutex
	nacked := map[string]bool{}
	router.AddConsumerHandler("orders", "orders", sub, func(m *message.Message) error {
		got <- seen{m.UUID, m.Metadata.Get(ports.HeaderRedeliveryCount), m.Metadata.Get(ports.HeaderTenantID)}
		mu.Lock()
		defer mu.Unlock()
		if !nacked[m.UUID] {
			nacked[m.UUID] = true
			m.Nack()
			return nil
		}
		return nil // the router acks
	})
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	<-router.Running()

	m := message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))
	m.Metadata.Set(ports.HeaderTenantID, "t-1")
	if err := a.WatermillPublisher().Publish("orders", m); err != nil {
		t.Fatalf("publish: %v", err)
	}
	for i := range 2 {
		select {
		case s := <-got:
			if s.uuid != m.UUID || s.count != strconv.Itoa(i) || s.tenant != "t-1" {
				t.Fatalf("delivery %d: %+v, want uuid %s, redelivery count %d, tenant t-1", i, s, m.UUID, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d did not arrive", i)
		}
	}
	select {
	case s := <-got:
		t.Fatalf("acked message delivered again: %+v", s)
	case <-time.After(300 * time.Millisecond): // a quiet window after the ack
	}
	if err := router.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
