package portable_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// ReceiveAppend appends to the caller's slice (in place when it has room),
// for deliveries received now and for held ones that fell due, and returns
// the slice as it was with an error.
func TestReceiveAppendAppendsToTheCallersSlice(t *testing.T) {
	ctx, _, a := newToy(t)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 8})
	if err != nil {
		t.Fatal(err)
	}
	ra, ok := sub.(ports.ReceiveAppender)
	if !ok {
		t.Fatalf("%T is not a ports.ReceiveAppender", sub)
	}
	for _, m := range []ports.Message{
		{Topic: "t", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m1")},
		{Topic: "t", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m2")},
		{Topic: "t", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m3"), Delay: time.Millisecond}, // held, then due
	} {
		if err := a.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	first := &ports.Delivery{ID: "caller's"}
	buf := make([]*ports.Delivery, 1, 8)
	buf[0] = first
	got := buf
	for len(got) < 4 {
		if got, err = ra.ReceiveAppend(ctx, got, 8); err != nil {
			t.Fatal(err)
		}
	}
	if got[0] != first || &got[0] != &buf[0] {
		t.Fatal("ReceiveAppend did not append in place to the caller's slice")
	}
	var ids []string
	for _, d := range got[1:] {
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"m1", "m2", "m3"}) {
		t.Fatalf("appended %v, want m1, m2, m3", ids)
	}
	if err := sub.Settle(ctx, got[1:], ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := ra.ReceiveAppend(ctx, buf[:1], 1)
	if !errors.Is(err, ports.ErrClosed) || len(after) != 1 || after[0] != first {
		t.Fatalf("ReceiveAppend after Stop = %d deliveries, %v; want the caller's slice as it was and ErrClosed", len(after), err)
	}
}
