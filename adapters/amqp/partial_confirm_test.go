package amqp_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/ports"
)

// A Send cancelled part way reports exactly: a message whose confirm
// arrived is confirmed (nil), one never written fails with ctx.Err() alone
// and is never delivered, one written whose confirm did not arrive wraps
// ports.ErrUnconfirmed (it may have been stored). It used to report every
// message unconfirmed while most had been delivered, and went on
// publishing after ctx was done.
func TestCancelledSendReportsTheConfirmedMessages(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	sub, err := a.Subscribe(testCtx(t), ports.SubscriptionSpec{Topic: "partial", Group: "g", InFlight: 4000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })

	const n = 2000
	msgs := make([]ports.Message, n)
	for i := range msgs {
		msgs[i] = ports.Message{Topic: "partial", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "m"+strconv.Itoa(i))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Millisecond)
	defer cancel()
	err = a.Send(ctx, msgs...)

	failed := map[int]error{}
	for _, se := range ports.SendErrors(err) {
		failed[se.Index] = se.Err
	}
	if err != nil && len(failed) == 0 {
		t.Fatalf("Send = %v: no *ports.SendError in it", err)
	}
	confirmed, maybe := map[string]bool{}, 0
	notWritten := map[string]bool{}
	for i := range msgs {
		id := "m" + strconv.Itoa(i)
		switch e, bad := failed[i]; {
		case !bad:
			confirmed[id] = true
		case errors.Is(e, ports.ErrUnconfirmed):
			maybe++
		case errors.Is(e, context.DeadlineExceeded):
			notWritten[id] = true
		default:
			t.Fatalf("message %d: unexpected error %v", i, e)
		}
	}
	t.Logf("confirmed %d, unconfirmed (may be stored) %d, not written %d", len(confirmed), maybe, len(notWritten))

	// Receive until every confirmed message is seen, then as long as more
	// arrive within a quiet second (the unconfirmed ones may be there too).
	seen := map[string]bool{}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		quiet := 1 * time.Second
		if len(seenIn(confirmed, seen)) < len(confirmed) {
			quiet = time.Until(deadline)
		}
		rctx, rcancel := context.WithTimeout(context.Background(), quiet)
		ds, err := sub.Receive(rctx, 500)
		rcancel()
		if err != nil {
			break // quiet: nothing more arrives
		}
		for _, d := range ds {
			seen[d.ID] = true
		}
		if err := sub.Settle(context.Background(), ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatal(err)
		}
	}
	for id := range confirmed {
		if !seen[id] {
			t.Errorf("message %s was reported confirmed and never delivered", id)
		}
	}
	for id := range notWritten {
		if seen[id] {
			t.Errorf("message %s failed as not written (ctx.Err() alone) yet was delivered", id)
		}
	}
	if extra := len(seen) - len(confirmed); extra > maybe {
		t.Errorf("%d delivered messages were reported unconfirmed, more than the %d that may have been stored", extra, maybe)
	}
}

func seenIn(want, seen map[string]bool) []string {
	var out []string
	for id := range want {
		if seen[id] {
			out = append(out, id)
		}
	}
	return out
}

// A group declared ahead keeps what is sent before its first consumer.
func TestDeclareGroupKeepsMessagesBeforeTheFirstConsumer(t *testing.T) {
	a := newAdapter(t, amqp.Options{})
	ctx := testCtx(t)
	if err := ports.DeclareGroup(ctx, a, "early", "g"); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, ports.Message{Topic: "early", Payload: []byte(`{}`), Headers: ports.NewHeaders(ports.HeaderID, "e1")}); err != nil {
		t.Fatalf("Send after DeclareGroup: %v", err)
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "early", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })
	ds, err := sub.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].ID != "e1" {
		t.Fatalf("Receive = %v, %v; want the message sent after DeclareGroup", ds, err)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}
