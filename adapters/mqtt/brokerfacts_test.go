package mqtt_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// TestGroupBacklogLivesInMemberSessions measures what each broker does
// with a LoadBalance group's messages while every member is down (TCK case
// 13 and the DurableGroups capability): the broker parks each message in
// one member's session (round-robin on both: the embedded broker's split
// is checked exactly), so a member that comes back under its instance
// identity gets its share, and a member with a new identity gets none of
// the backlog.
func TestGroupBacklogLivesInMemberSessions(t *testing.T) {
	for _, b := range faultBrokers(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const n = 6
			a := newAdapter(t, ctx, "mqtt://"+b.addr, "facts"+randHex(), b.rm)
			spec := func(inst string) ports.SubscriptionSpec {
				return ports.SubscriptionSpec{Topic: "orders", Group: "billing", Instance: inst}
			}
			for _, inst := range []string{"r0", "r1"} {
				sub, err := a.Subscribe(ctx, spec(inst))
				if err != nil {
					t.Fatal(err)
				}
				if err := sub.Stop(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// Both brokers route a publish before they acknowledge it: once
			// the last send is confirmed, the backlog is parked.
			sent := produce(ctx, t, a, "orders", n, nil)

			fresh, err := a.Subscribe(ctx, spec("fresh"))
			if err != nil {
				t.Fatal(err)
			}
			noDelivery(t, fresh, 500*time.Millisecond, "a member with a new identity must not receive the backlog parked in other sessions")
			if err := fresh.Stop(ctx); err != nil {
				t.Fatal(err)
			}

			got := map[string]int{}
			share := map[string]int{}
			for _, inst := range []string{"r0", "r1"} {
				sub, err := a.Subscribe(ctx, spec(inst))
				if err != nil {
					t.Fatal(err)
				}
				for {
					rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
					ds, err := sub.Receive(rctx, n)
					rcancel()
					if err != nil {
						break // quiet: this session's share is drained
					}
					for _, d := range ds {
						got[d.ID]++
						share[inst]++
						if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := sub.Stop(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range sent {
				if got[id] != 1 {
					t.Fatalf("backlog message %s delivered %d times across the returning members, want 1 (shares %v)", id, got[id], share)
				}
			}
			// The embedded broker takes the disconnected members in turn.
			if b.name == "embedded" && (share["r0"] != n/2 || share["r1"] != n/2) {
				t.Fatalf("backlog of %d split %v between two disconnected members, want round-robin: %d each", n, share, n/2)
			}
			t.Logf("%s: backlog of %d parked in member sessions: r0 got %d, r1 got %d, a new identity got 0", b.name, n, share["r0"], share["r1"])
		})
	}
}
