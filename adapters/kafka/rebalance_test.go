package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// TestRebalanceMidFlight: member A holds deliveries unsettled when member
// B joins. The rebalance revokes A's partitions: A's late acks fail with
// driver.ErrRecordsLost (their in-flight slots are freed), A sends no
// commit in its old generation after the revocation, and every message is
// still handled (no loss).
func TestRebalanceMidFlight(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("rb", 2)
	spec := ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 64}
	a := b.adapter(t, cfg)
	sa := subscribe(t, a, spec)

	const n = 20
	var all []string
	for i := range n {
		all = append(all, fmt.Sprintf("m%02d", i))
	}
	send(t, a, "t", nil, all...)
	held := receiveN(t, sa, n, 10*time.Second)
	member, gen := held[0].Facts.Get("member"), held[0].Facts.Get("generation")
	mark := b.commitCount()

	sb := subscribe(t, b.adapter(t, cfg), spec) // returns once the rebalance completed

	for _, d := range held {
		if err := sa.Settle(t.Context(), []*ports.Delivery{d}, ack); !errors.Is(err, driver.ErrRecordsLost) {
			t.Fatalf("late ack of %s from the revoked member: %v, want driver.ErrRecordsLost", d.Payload, err)
		}
	}
	if b.cluster != nil {
		for _, c := range b.commitsSince(mark) {
			if c.member == member && strconv.Itoa(int(c.generation)) == gen {
				t.Fatalf("revoked member %s committed %v in its old generation %s", member, c.offsets, gen)
			}
		}
	}

	// No loss: both members together handle every message.
	done := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(done) < n {
		for _, s := range []ports.Subscription{sa, sb} {
			rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			ds, err := s.Receive(rctx, n)
			rcancel()
			if ctx.Err() != nil {
				t.Fatalf("handled %d of %d messages after the rebalance", len(done), n)
			}
			if err != nil {
				continue
			}
			if err := s.Settle(ctx, ds, ack); err != nil {
				t.Fatalf("ack after the rebalance: %v", err)
			}
			for _, d := range ds {
				done[string(d.Payload)] = true
			}
		}
	}
	for _, m := range all {
		if !done[m] {
			t.Fatalf("message %s lost", m)
		}
	}
}
