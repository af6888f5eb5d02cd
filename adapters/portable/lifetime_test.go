package portable_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/adapters/portable"
	"github.com/sluicemq/sluice/ports"
)

// A delivery kept past its settlement stays its own: deliveries are carved
// from chunks shared by consecutive receives and never reused, so one
// received one at a time, settled, and read afterwards (and meanwhile,
// from another goroutine, while later deliveries of its chunk are
// received) still carries its own id and payload, and a second Settle of
// it is refused without settling anything. Run with -race: a delivery
// given a second life would be written while the reader reads it.
func TestKeptDeliveryStaysItsOwn(t *testing.T) {
	ctx, _, a := newToy(t)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(ctx)
	ra := sub.(ports.ReceiveAppender)
	const n = 100 // a few chunks' worth
	var (
		mu   sync.Mutex
		kept []*ports.Delivery
		stop = make(chan struct{})
		read = make(chan error, 1)
	)
	go func() { // reads the kept deliveries while later ones are received
		for {
			mu.Lock()
			ks := kept
			mu.Unlock()
			for i, d := range ks {
				if want := fmt.Sprintf("m%d", i); d.ID != want || string(d.Payload) != want {
					read <- fmt.Errorf("kept delivery %s now reads as %s with payload %q", want, d.ID, d.Payload)
					return
				}
			}
			select {
			case <-stop:
				read <- nil
				return
			default:
			}
		}
	}()
	buf := make([]*ports.Delivery, 0, 4)
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		if err := a.Send(ctx, ports.Message{Topic: "t", Payload: []byte(id), Headers: ports.NewHeaders(ports.HeaderID, id)}); err != nil {
			t.Fatal(err)
		}
		ds, err := ra.ReceiveAppend(ctx, buf[:0], 1)
		if err != nil || len(ds) != 1 {
			t.Fatalf("receive %d: %d deliveries, %v", i, len(ds), err)
		}
		d := ds[0]
		if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		kept = append(kept, d)
		mu.Unlock()
		buf = ds
	}
	close(stop)
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	for i, d := range kept {
		if want := fmt.Sprintf("m%d", i); d.ID != want || string(d.Payload) != want {
			t.Fatalf("kept delivery %s now reads as %s with payload %q", want, d.ID, d.Payload)
		}
		if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); !errors.Is(err, portable.ErrAlreadySettled) {
			t.Fatalf("second Settle of %s = %v, want ErrAlreadySettled", d.ID, err)
		}
	}
}

// Recycle takes back only acknowledged deliveries of its own subscription;
// the next receive hands such a delivery out again for the next message
// (ports.Recycler), and one not given back is never reused.
func TestRecycleReusesOnlyAcknowledgedDeliveries(t *testing.T) {
	ctx, _, a := newToy(t)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(ctx)
	other, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "u", Group: "g", InFlight: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop(ctx)
	rc := sub.(ports.Recycler)
	buf := make([]*ports.Delivery, 0, 1) // as flow receives (ReceiveAppend)
	receive := func(id string) *ports.Delivery {
		t.Helper()
		if err := a.Send(ctx, ports.Message{Topic: "t", Payload: []byte(id), Headers: ports.NewHeaders(ports.HeaderID, id)}); err != nil {
			t.Fatal(err)
		}
		ds, err := sub.(ports.ReceiveAppender).ReceiveAppend(ctx, buf[:0], 1)
		if err != nil || len(ds) != 1 || ds[0].ID != id {
			t.Fatalf("receive %s: %v, %v", id, ds, err)
		}
		return ds[0]
	}
	ack := ports.Disposition{Action: ports.Ack}

	first := receive("m1")
	rc.Recycle([]*ports.Delivery{first}) // not settled yet: refused
	if second := receive("m2"); second == first {
		t.Fatal("a delivery given back before its settlement was handed out again")
	} else if err := sub.Settle(ctx, []*ports.Delivery{first, second}, ack); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, ports.Message{Topic: "u", Payload: []byte("x"), Headers: ports.NewHeaders(ports.HeaderID, "x")}); err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Receive(ctx, 1)
	if err != nil || len(foreign) != 1 {
		t.Fatalf("receive on the other subscription: %v, %v", foreign, err)
	}
	if err := other.Settle(ctx, foreign, ack); err != nil {
		t.Fatal(err)
	}
	rc.Recycle(foreign) // another subscription's: ignored
	rc.Recycle([]*ports.Delivery{first})
	if first.ID != "" || first.Payload != nil {
		t.Fatalf("a recycled delivery still holds %s %q", first.ID, first.Payload)
	}
	third := receive("m3")
	if third != first || string(third.Payload) != "m3" {
		t.Fatalf("the acknowledged delivery given back was not reused (got %p, gave back %p)", third, first)
	}
	if fourth := receive("m4"); fourth == foreign[0] {
		t.Fatal("another subscription's delivery was taken back")
	}
	if err := sub.Settle(ctx, []*ports.Delivery{third}, ack); err != nil {
		t.Fatalf("settling the reused delivery: %v", err)
	}
}
