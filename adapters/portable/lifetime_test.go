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
