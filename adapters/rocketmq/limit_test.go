package rocketmq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/ports"
)

// RocketMQ moves a message delivered its group's maximum number of times
// to %DLQ%<group>, which the adapter does not read. A requeue of a
// delivery at that limit is a counted copy on the topic, addressed to the
// group (the other groups acknowledge it unseen): a retry policy above the
// limit loses nothing.
func TestRequeueAtTheDeliveryLimitIsACopy(t *testing.T) {
	b, err := rocketmqtest.Start(rocketmqtest.WithMaxDeliveryAttempts(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := rocketmq.New(ctx, rocketmq.Options{Endpoint: b.Endpoint(), InvisibleDuration: 2 * time.Second, AwaitDuration: time.Second, DeliveryLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	if got := a.Capabilities().DeliveryLimit; got != 3 {
		t.Fatalf("Capabilities().DeliveryLimit = %d, want the option's 3", got)
	}
	if got := rocketmq.Capabilities().DeliveryLimit; got != rocketmq.DefaultDeliveryLimit {
		t.Fatalf("the zero Adapter declares a delivery limit of %d, want RocketMQ's default %d", got, rocketmq.DefaultDeliveryLimit)
	}
	subscribe := func(group string) ports.Subscription {
		s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "limited", Group: group, InFlight: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
		return s
	}
	g, h := subscribe("g"), subscribe("h")
	if err := a.Send(ctx, ports.Message{Topic: "limited", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m1")}); err != nil {
		t.Fatal(err)
	}
	for n := range 7 { // past the limit twice over
		d := receiveOne(t, ctx, g)
		if d.ID != "m1" || d.RedeliveryCount != n {
			t.Fatalf("delivery %d: %s with redelivery count %d, want m1 with %d", n+1, d.ID, d.RedeliveryCount, n)
		}
		if err := g.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue}); err != nil {
			t.Fatal(err)
		}
	}
	d := receiveOne(t, ctx, g)
	if err := g.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil || d.RedeliveryCount != 7 {
		t.Fatalf("delivery 8: redelivery count %d, ack %v; want 7, nil", d.RedeliveryCount, err)
	}
	d = receiveOne(t, ctx, h)
	if err := h.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil || d.ID != "m1" || d.RedeliveryCount != 0 {
		t.Fatalf("the other group got %s with count %d (ack %v), want m1 with 0", d.ID, d.RedeliveryCount, err)
	}
	for name, s := range map[string]ports.Subscription{"g": g, "h": h} {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second) // proving that nothing comes
		ds, err := s.Receive(rctx, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("group %s received %v (%v) after its ack, want nothing: %s", name, ds, err, fmt.Sprint(b.Counters()))
		}
	}
	if c := b.Counters(); c.DeadLettered != 0 {
		t.Fatalf("the peer moved %d message(s) to %%DLQ%%: %+v", c.DeadLettered, c)
	}
}
