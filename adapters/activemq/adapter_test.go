package activemq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/ports"
)

func newAdapter(t *testing.T, o activemq.Options) *activemq.Adapter {
	t.Helper()
	if o.Addr == "" {
		o.Addr = activemqtest.Shared(t).StompAddr
	}
	if o.Namespace == "" {
		o.Namespace = namespace("unit")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := activemq.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

// Headers whose names STOMP or ActiveMQ reserve ("type", "expires",
// "JMSType", "AMQ_SCHEDULED_DELAY", the escape prefix itself) survive the
// hop unchanged and change nothing on the broker.
func TestReservedHeaderNamesRoundTrip(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "hdr", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	sent := ports.NewHeaders(
		"type", "order",
		"expires", "1",
		"JMSType", "x",
		"AMQ_SCHEDULED_DELAY", "60000",
		"sluice-hdr-type", "nested",
		"persistent", "false",
		"x-multi", "a:b\nc\\d",
	)
	if err := a.Send(ctx, ports.Message{Topic: "hdr", Payload: []byte(`{}`), Headers: sent}); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil {
		t.Fatalf("Receive: %v (an escaped AMQ_SCHEDULED_DELAY or expires must not delay or expire the message)", err)
	}
	for _, hdr := range sent {
		k, v := hdr.Name, hdr.Value
		if got := ds[0].Headers.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

// Subscribe rejects a bad spec and a Broadcast of a dead-letter topic;
// Settle after Stop returns ErrClosed and settles nothing.
func TestSubscribeErrorsAndSettleAfterStop(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t"}); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("LOAD_BALANCE without a group: %v, want ErrInvalid", err)
	}
	if _, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t.dlq", Mode: ports.Broadcast}); !errors.Is(err, ports.ErrUnsupported) {
		t.Errorf("BROADCAST of a dead-letter topic: %v, want ErrUnsupported", err)
	}
	spec := ports.SubscriptionSpec{Topic: "stop", Group: "g"}
	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, ports.Message{Topic: "stop", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Settle after Stop: %v, want ErrClosed", err)
	}
	again, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Stop(context.Background())
	got, err := again.Receive(ctx, 1)
	if err != nil || got[0].ID != ds[0].ID || got[0].RedeliveryCount != 1 || got[0].Facts.Get("redelivered") != "true" {
		t.Fatalf("after Stop without settlement: %v %v, want %s again, redelivered, count 1", got, err, ds[0].ID)
	}
	if err := again.Settle(ctx, got, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := again.Settle(ctx, got, ports.Disposition{Action: ports.Requeue}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("second, different settlement: %v, want ErrConflict", err)
	}
}

// Subscribing to a queue with a backlog larger than go-stomp's channel
// buffers returns (the broker starts delivering before it answers the
// subscription's receipt barrier) and hands out the whole backlog.
func TestSubscribeToBacklog(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := ports.SubscriptionSpec{Topic: "backlog", Group: "g", InFlight: 100}
	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 300
	msgs := make([]ports.Message, n)
	for i := range msgs {
		msgs[i] = ports.Message{Topic: "backlog", Payload: []byte(`{}`)}
	}
	if err := a.Send(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	sub, err = a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatalf("Subscribe to a queue holding %d messages: %v", n, err)
	}
	defer sub.Stop(context.Background())
	for got := 0; got < n; {
		ds, err := sub.Receive(ctx, 100)
		if err != nil {
			t.Fatalf("after %d of %d: %v", got, n, err)
		}
		if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatal(err)
		}
		got += len(ds)
	}
}

// A requeue copy goes to the requeuing group's own queue: another group of
// the topic gets the message once, the requeuing group again, counted.
func TestRequeueStaysInItsGroup(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g1 := mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: "rq", Group: "g1"})
	g2 := mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: "rq", Group: "g2"})
	if err := a.Send(ctx, ports.Message{Topic: "rq", Payload: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	d := recvOne(t, ctx, g1, "g1")
	if err := g1.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatal(err)
	}
	if d := recvOne(t, ctx, g1, "g1's requeue copy"); d.RedeliveryCount != 1 {
		t.Fatalf("g1's copy has redelivery count %d, want 1", d.RedeliveryCount)
	}
	ack(t, ctx, g2, recvOne(t, ctx, g2, "g2"))
	nothing(t, g2, 500*time.Millisecond, "g1's requeue copy reached g2")
}
