package portable_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// A settlement that fails gives its in-flight slots back: the deliveries
// are left to the broker's redelivery, and the window must not shrink for
// good (a settlement that keeps failing would otherwise stop Receive).
func TestFailedSettleGivesTheSlotsBack(t *testing.T) {
	ctx, b, a := newToy(t)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"m1", "m2", "m3"} {
		if err := a.Send(ctx, ports.Message{Topic: "t", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, id)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []*ports.Delivery
	for len(got) < 2 {
		ds, err := sub.Receive(ctx, 2-len(got))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ds...)
	}
	b.setFailSends(true) // the requeue copies are not confirmed
	if err := sub.Settle(ctx, got, ports.Disposition{Action: ports.Requeue}); err == nil {
		t.Fatal("Settle succeeded with the requeue copies refused")
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	ds, err := sub.Receive(rctx, 1)
	if err != nil {
		t.Fatalf("Receive after a failed Settle of the whole window = %v: the slots were not given back", err)
	}
	if len(ds) != 1 || ds[0].ID != "m3" {
		t.Fatalf("Receive = %d deliveries (first %q), want m3", len(ds), ds[0].ID)
	}
	// A retry of the failed settlement succeeds and frees nothing twice.
	b.setFailSends(false)
	if err := sub.Settle(ctx, got, ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatalf("retried Settle: %v", err)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
