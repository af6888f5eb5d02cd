package portable_test

import (
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// Headers a driver left in its records (ports.HeaderDeferrer): the
// delivery's identity is read at once, the rest only when loaded (once;
// another subscription's delivery is left alone), a requeue or dead
// letter carries them, and a record with a transport header (a requeue
// copy's count) has its headers read at once.
func TestDeferredHeadersLoadOnceAndTravelWithCopies(t *testing.T) {
	ctx, _, a := newToy(t)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(ctx)
	dlq, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t.dlq", Group: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Stop(ctx)
	hd := sub.(ports.HeaderDeferrer)
	hd.DeferHeaders()
	for _, id := range []string{"m1", "m2", "m3"} {
		if err := a.Send(ctx, ports.Message{Topic: "t", Payload: []byte(id), Headers: ports.NewHeaders(ports.HeaderID, id, "x", "v-"+id)}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := sub.Receive(ctx, 3)
	if err != nil || len(ds) != 3 {
		t.Fatalf("receive: %v, %v", ds, err)
	}
	m1, m2, m3 := ds[0], ds[1], ds[2]
	if m1.ID != "m1" || m1.IDSource != ports.IDProducer || m1.Headers != nil {
		t.Fatalf("deferred delivery: id %q (%v), headers %v; want the producer's id and no headers yet", m1.ID, m1.IDSource, m1.Headers)
	}
	hd.LoadHeaders(m1)
	loaded := m1.Headers
	hd.LoadHeaders(m1)
	if m1.Headers.Get("x") != "v-m1" || &m1.Headers[0] != &loaded[0] {
		t.Fatalf("loaded headers %v (loaded twice: %v)", m1.Headers, &m1.Headers[0] != &loaded[0])
	}
	hd.LoadHeaders(&ports.Delivery{}) // not this subscription's: nothing happens

	if err := sub.Settle(ctx, []*ports.Delivery{m2}, ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatal(err)
	}
	again, err := sub.Receive(ctx, 1)
	if err != nil || again[0].ID != "m2" || again[0].RedeliveryCount != 1 || again[0].Headers.Get("x") != "v-m2" {
		t.Fatalf("requeue copy: %v, %v; want m2 counted once with its headers read at once (the copy's count is a transport header)", again, err)
	}
	if err := sub.Settle(ctx, []*ports.Delivery{m1}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Settle(ctx, append(again, m3), ports.Disposition{Action: ports.DeadLetter}); err != nil {
		t.Fatal(err)
	}
	dead, err := dlq.Receive(ctx, 2)
	if err != nil || len(dead) != 2 {
		t.Fatalf("dead letters: %v, %v", dead, err)
	}
	for i, id := range []string{"m2", "m3"} {
		if d := dead[i]; d.Headers.Get("x") != "v-"+id || d.ID != id {
			t.Fatalf("dead letter %d: %s with headers %v; want %s with its own", i, d.ID, d.Headers, id)
		}
	}
}
