package amqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/adapters/watermill/wmamqp"
	"github.com/sluicemq/sluice/ports"
)

// TestWatermillAMQPInterop: an unmodified watermill-amqp publisher and
// subscriber, configured with wmamqp.Config, exchange messages with
// sluice in both directions, envelope included.
func TestWatermillAMQPInterop(t *testing.T) {
	url := rabbittest.Shared(t).URL
	ns := namespace("interop")
	a := newAdapter(t, amqp.Options{URL: url, Namespace: ns})
	cfg, err := wmamqp.Config(amqp.Options{URL: url, Namespace: ns}, "legacy")
	if err != nil {
		t.Fatal(err)
	}

	// watermill-amqp → sluice.
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "sluice"})
	wpub, err := wamqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer wpub.Close()
	wm := message.NewMessage("wm-1", []byte(`{"n":1}`))
	wm.Metadata.Set(ports.HeaderType, "order.placed.v1")
	wm.Metadata.Set("x-user", "alice")
	if err := wpub.Publish("orders", wm); err != nil {
		t.Fatal(err)
	}
	d := receive1(t, s)
	if d.ID != "wm-1" || d.Headers.Get(ports.HeaderType) != "order.placed.v1" || d.Headers.Get("x-user") != "alice" {
		t.Fatalf("sluice got id %q headers %v", d.ID, d.Headers)
	}

	// sluice → watermill-amqp (its subscriber joins group "legacy").
	wsub, err := wamqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer wsub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := wsub.Subscribe(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, ports.Message{Topic: "orders", Payload: []byte(`{"n":2}`), Headers: ports.NewHeaders(ports.HeaderID, "sl-2", ports.HeaderTenantID, "t1")}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		if m.UUID != "sl-2" || m.Metadata.Get(ports.HeaderTenantID) != "t1" || string(m.Payload) != `{"n":2}` {
			t.Fatalf("watermill-amqp got %s %v %s", m.UUID, m.Metadata, m.Payload)
		}
		m.Ack()
	case <-ctx.Done():
		t.Fatal("watermill-amqp subscriber received nothing")
	}
	if err := s.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}
