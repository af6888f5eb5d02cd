package amqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// TestAckIsWrittenWithoutFlush: Settle(Ack) only records the ack, and the
// subscription writes it on its own within milliseconds: when the
// connection is cut afterwards, with no Flush or Stop, the broker
// redelivers the unsettled message and not the acked one.
func TestAckIsWrittenWithoutFlush(t *testing.T) {
	p := newProxied(t, "ackw", "")
	a, direct := p.a, p.direct
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "acks", Group: "g"})
	send(t, direct, "acks", "acked")
	send(t, direct, "acks", "unsettled")
	acked, unsettled := receive1(t, s), receive1(t, s)
	if acked.ID != "acked" || unsettled.ID != "unsettled" {
		t.Fatalf("received %q, %q; want acked, unsettled", acked.ID, unsettled.ID)
	}
	if err := s.Settle(testCtx(t), []*ports.Delivery{acked}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // many times the ack interval
	p.cut(t)
	if d := receive1(t, s); d.ID != "unsettled" {
		t.Fatalf("after the cut received %q, want the unsettled message again", d.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ds, _ := s.Receive(ctx, 1); len(ds) > 0 {
		t.Fatalf("the acked message %q came again: its ack was never written", ds[0].ID)
	}
}
