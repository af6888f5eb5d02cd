package mqtt_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/ports"
)

// closeLog hands on the client id of every connection the embedded broker
// logs as closed (after it detached the session).
type closeLog chan string

func (h closeLog) Enabled(context.Context, slog.Level) bool { return true }
func (h closeLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h closeLog) WithGroup(string) slog.Handler            { return h }
func (h closeLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "embedded: connection closed" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "client" {
				select {
				case h <- a.Value.String():
				default:
				}
			}
			return true
		})
	}
	return nil
}

// TestGroupBacklogLivesInMemberSessions measures what each broker does
// with a LoadBalance group's messages while every member is down (TCK case
// 13 and the DurableGroups capability): the broker parks each message in
// one member's session (round-robin on both: the embedded broker's split
// is checked exactly), so a member that comes back under its instance
// identity gets its share, and a member with a new identity gets none of
// the backlog.
func TestGroupBacklogLivesInMemberSessions(t *testing.T) {
	closed := make(closeLog, 64)
	brokers := faultBrokers(t)
	for i := range brokers {
		if brokers[i].name == "embedded" { // one whose closes the test sees
			eb, err := embedded.Start(embedded.Options{Logger: slog.New(closed)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = eb.Close() })
			brokers[i].addr = eb.Addr()
		}
	}
	for _, b := range brokers {
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
			if b.name == "embedded" {
				// Stop returns once DISCONNECT is written; the round-robin
				// below needs both members disconnected on the broker.
				awaitClosed(t, closed, ":billing:r0", ":billing:r1")
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

// awaitClosed waits until the embedded broker logged the connections of
// the client ids ending in suffixes as closed.
func awaitClosed(t *testing.T, closed closeLog, suffixes ...string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for len(suffixes) > 0 {
		select {
		case id := <-closed:
			for i, suf := range suffixes {
				if strings.HasSuffix(id, suf) {
					suffixes = append(suffixes[:i], suffixes[i+1:]...)
					break
				}
			}
		case <-deadline:
			t.Fatalf("the embedded broker did not close the connections of %q within 10s of their Stop", suffixes)
		}
	}
}
