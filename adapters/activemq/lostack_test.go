package activemq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// TestAckRoundWithALostHandleAcksNone: an ACK round holding a delivery of
// a connection lost in a cut and deliveries of the connection that
// replaced it fails with ErrRecordsLost and acks none of them; flow's
// engine then settles each member again on its own, and the live ones
// must be acked then, once. Before, the round acked its live members and
// still failed; their second ACK was refused by the broker, which had
// taken the first, and the fault kit's rpc-restart counted them lost.
func TestAckRoundWithALostHandleAcksNone(t *testing.T) {
	p, err := faults.NewProxy(activemqtest.Shared(t).StompAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ns := namespace("lostack")
	a := newAdapter(t, activemq.Options{Addr: p.Addr(), Namespace: ns, ReconnectBackoff: 20 * time.Millisecond, ReconnectMaxBackoff: 200 * time.Millisecond})
	direct := newAdapter(t, activemq.Options{Namespace: ns})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: "acks", Group: "g", InFlight: 8})
	send := func(id string) {
		t.Helper()
		if err := direct.Send(ctx, ports.Message{Topic: "acks", Payload: []byte(id), Headers: ports.NewHeaders(ports.HeaderID, id)}); err != nil {
			t.Fatal(err)
		}
	}
	ack := ports.Disposition{Action: ports.Ack}

	send("m1")
	old := recvOne(t, ctx, s, "m1") // on the first connection, held across the cut
	if n := p.Reset(); n < 1 {
		t.Fatalf("the proxy reset %d connections, want at least the subscription's", n)
	}
	again := recvOne(t, ctx, s, "m1 again") // redelivered on the new connection
	send("m2")
	d2 := recvOne(t, ctx, s, "m2")
	if old.ID != "m1" || again.ID != "m1" || d2.ID != "m2" {
		t.Fatalf("received %q, then %q and %q; want m1, m1 again and m2", old.ID, again.ID, d2.ID)
	}

	if err := s.Settle(ctx, []*ports.Delivery{old, again, d2}, ack); !errors.Is(err, driver.ErrRecordsLost) {
		t.Fatalf("Settle of a round with a delivery of the lost connection returned %v, want ErrRecordsLost", err)
	}
	// As flow's engine does after a failed round: each member again.
	if err := s.Settle(ctx, []*ports.Delivery{old}, ack); !errors.Is(err, driver.ErrRecordsLost) {
		t.Fatalf("Settle of the lost connection's delivery returned %v, want ErrRecordsLost", err)
	}
	for _, d := range []*ports.Delivery{again, d2} {
		if err := s.Settle(ctx, []*ports.Delivery{d}, ack); err != nil {
			t.Fatalf("Settle of %s on its own after the failed round: %v (the round acked it already?)", d.ID, err)
		}
	}
	if f, ok := s.(ports.Flusher); ok {
		if err := f.Flush(ctx); err != nil {
			t.Fatalf("Flush after the acks: %v", err)
		}
	}
	nothing(t, s, time.Second, "after every message was acked once")
}
