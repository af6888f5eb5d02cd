package amqp_test

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// TestAckRoundWithALostHandleAcksNone: an ACK round that holds a delivery
// of a channel lost in a connection cut and deliveries of the channel
// that replaced it fails with ErrRecordsLost and acks none of them — the
// flow engine then settles each member again on its own, and the live
// ones must succeed. Before, SendAcks recorded the live members' acks and
// still failed the round: their settlement again was refused as "settled
// already" (ErrRecordsLost), and the broker, which got their acks,
// never redelivered them (the fault kit's rpc-restart LOST them).
func TestAckRoundWithALostHandleAcksNone(t *testing.T) {
	p := newProxied(t, "lostack", "")
	a, direct := p.a, p.direct
	spec := ports.SubscriptionSpec{Topic: "acks", Group: "g"}
	s, err := a.Subscribe(testCtx(t), spec)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	ack := ports.Disposition{Action: ports.Ack}

	send(t, direct, "acks", "m1")
	old := receive1(t, s) // on the first channel, held across the cut
	p.cut(t)
	again := receive1(t, s) // m1 redelivered on the new channel
	send(t, direct, "acks", "m2")
	send(t, direct, "acks", "m3")
	d2, d3 := receive1(t, s), receive1(t, s)
	if old.ID != "m1" || again.ID != "m1" || d2.ID != "m2" || d3.ID != "m3" {
		t.Fatalf("received %q, then %q, %q and %q; want m1, then m1 again, m2 and m3", old.ID, again.ID, d2.ID, d3.ID)
	}

	// One round with both copies of m1 (as when a handler held across
	// the cut ends with the copy's): it fails, and acks nothing.
	if err := s.Settle(testCtx(t), []*ports.Delivery{old, again, d2, d3}, ack); !errors.Is(err, driver.ErrRecordsLost) {
		t.Fatalf("Settle of a round with a lost delivery returned %v, want ErrRecordsLost", err)
	}
	// As the flow engine does after a failed round: each member again
	// (but m3, left unsettled).
	if err := s.Settle(testCtx(t), []*ports.Delivery{old}, ack); !errors.Is(err, driver.ErrRecordsLost) {
		t.Fatalf("Settle of the lost delivery returned %v, want ErrRecordsLost", err)
	}
	for _, d := range []*ports.Delivery{again, d2} {
		if err := s.Settle(testCtx(t), []*ports.Delivery{d}, ack); err != nil {
			t.Fatalf("Settle of %s (redelivered %d) after the failed round: %v; did the round record its ack?", d.ID, d.RedeliveryCount, err)
		}
	}
	if err := s.Stop(testCtx(t)); err != nil { // writes the acks, hands m3 back
		t.Fatalf("Stop: %v", err)
	}

	s2 := subscribe(t, a, spec)
	if d := receive1(t, s2); d.ID != "m3" {
		t.Fatalf("after the failed round received %q, want m3 again", d.ID)
	} else if err := s2.Settle(testCtx(t), []*ports.Delivery{d}, ack); err != nil {
		t.Fatal(err)
	}
	// m1 and m2 were acked: a marker sent now is the next delivery.
	send(t, direct, "acks", "marker")
	if d := receive1(t, s2); d.ID != "marker" {
		t.Fatalf("received %q, want the marker: an ack was not written", d.ID)
	}
}
