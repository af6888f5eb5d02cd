package rocketmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/ports"
)

// waitCounters waits, bounded, until cond holds for the peer's counters.
func waitCounters(t *testing.T, b *rocketmqtest.Broker, what string, cond func(rocketmqtest.Counters) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond(b.Counters()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 30s waiting for %s; peer counters %+v", what, b.Counters())
		}
		time.Sleep(10 * time.Millisecond) // polling counters, bounded
	}
}

func subscribeAndSend(t *testing.T, a *rocketmq.Adapter) (ports.Subscription, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "lease", Group: "g", InFlight: 4})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })
	if err := a.Send(ctx, ports.Message{Topic: "lease", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m1")}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	return sub, ctx
}

// TestLeaseRenewal: a message the pipeline holds longer than the invisible
// duration is not delivered again meanwhile (its invisibility is renewed),
// up to Options.MaxLease; past it, or with renewal off, it is delivered again.
func TestLeaseRenewal(t *testing.T) {
	const inv = 2 * time.Second // peerAdapter's; renewals leave ≥ 1 s of margin

	t.Run("a slow handler keeps its message", func(t *testing.T) {
		a, b := peerAdapter(t)
		sub, ctx := subscribeAndSend(t, a)
		d := receiveOne(t, ctx, sub)
		// Three renewals: the message was held past its first invisible
		// duration (each renewal comes after at least a third of it).
		waitCounters(t, b, "three renewals of the held message", func(c rocketmqtest.Counters) bool { return c.Changed >= 3 })
		if c := b.Counters(); c.Expired != 0 || c.Redelivered != 0 || c.Received != 1 {
			t.Fatalf("peer counters %+v: the held message expired or was delivered again", c)
		}
		if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatalf("Settle(ACK) after renewals: %v", err)
		}
		waitCounters(t, b, "the ack", func(c rocketmqtest.Counters) bool { return c.Acked == 1 })
		if c := b.Counters(); c.BadHandles != 0 {
			t.Fatalf("peer counters %+v: the ack used a dead receipt handle", c)
		}
	})

	for _, tc := range []struct {
		name  string
		lease time.Duration
	}{
		{"renewal stops at MaxLease", inv / 2},
		{"a negative MaxLease turns renewal off", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := peerAdapter(t, func(o *rocketmq.Options) { o.MaxLease = tc.lease })
			sub, ctx := subscribeAndSend(t, a)
			first := receiveOne(t, ctx, sub)
			again := receiveOne(t, ctx, sub)
			if again.ID != first.ID || again.RedeliveryCount != 1 {
				t.Fatalf("got %q (redelivery %d), want %q delivered again (redelivery 1)", again.ID, again.RedeliveryCount, first.ID)
			}
			if c := b.Counters(); c.Expired != 1 {
				t.Fatalf("peer counters %+v: want the unrenewed invisibility expired once", c)
			}
			if err := sub.Settle(ctx, []*ports.Delivery{again}, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatalf("Settle(ACK) of the redelivery: %v", err)
			}
		})
	}

	t.Run("a failed renewal is reported on Errors", func(t *testing.T) {
		a, b := peerAdapter(t)
		b.RefuseRenewals(true)
		sub, ctx := subscribeAndSend(t, a)
		d := receiveOne(t, ctx, sub)
		select {
		case err := <-sub.Errors():
			var be *ports.BrokerError
			if !errors.As(err, &be) || be.Op != "renew" || !strings.Contains(err.Error(), "renewal refused by fault hook") {
				t.Fatalf("Errors gave %v, want a renew BrokerError with the broker's reason", err)
			}
		case <-ctx.Done():
			t.Fatal("no error on Errors within the bound while every renewal was refused")
		}
		b.RefuseRenewals(false)
		if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Logf("Settle(ACK) after the refused renewals: %v (the invisibility may have ended)", err)
		}
	})

	if _, err := rocketmq.New(context.Background(), rocketmq.Options{Endpoint: "127.0.0.1:8081", RequestTimeout: -time.Second}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("RequestTimeout -1s = %v, want ErrInvalid", err)
	}
}
