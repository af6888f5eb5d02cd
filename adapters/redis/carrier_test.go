package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/ports"
)

// TestSubscriptionCarriesItsAcks: a Redis subscription's reads carry the
// XACK of what was settled since the last read (kit.RidingAcks), and it
// says so (ports.AckCarrier), so flow settles a receive's deliveries on
// its receive loop before the next read.
func TestSubscriptionCarriesItsAcks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newAdapter(t, redis.Options{})
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "carry", Group: "g", InFlight: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Stop(ctx) }()
	if c, ok := sub.(ports.AckCarrier); !ok || !c.CarriesAcks() {
		t.Fatalf("subscription %T: ports.AckCarrier %v, want one that carries its acks", sub, ok)
	}
}
