package mqtt_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/ports"
)

// A subscription whose resubscribe fails after a reconnect (here: the
// broker restarted without the session and refuses the first SUBSCRIBEs)
// reports it on Errors and subscribes again while the connection lasts,
// instead of staying connected without a subscription and receiving
// nothing.
func TestFailedResubscribeIsRetried(t *testing.T) {
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := newAdapter(t, ctx, "mqtt://"+addr, "resub"+randHex(), 0)
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "t", Group: "g", Instance: "r0"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())

	// The restarted broker has no session and refuses two SUBSCRIBEs.
	var refused atomic.Int32
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, err = embedded.Start(embedded.Options{Addr: addr, AllowSubscribe: func(_, filter string) bool {
		return !strings.Contains(filter, "/t") || refused.Add(1) > 2
	}})
	if err != nil {
		t.Fatalf("restart the broker on %s: %v", addr, err)
	}
	defer b.Close()

	for reported := false; !reported; {
		select {
		case err := <-sub.Errors():
			reported = strings.Contains(err.Error(), "resubscribe")
		case <-ctx.Done():
			t.Fatal("no failed resubscribe reported on Errors within 60s")
		}
	}
	// Until the subscription is back a message finds no subscriber: Send
	// fails it with ErrNoSubscriber; and until the adapter's connection is
	// back (the failed resubscribe may be reported first, on a busy
	// machine), with ErrUnconfirmed. Send until it is stored, then it must
	// arrive.
	for {
		err := a.Send(ctx, ports.Message{Topic: "t", Payload: []byte(`{}`)})
		if err == nil {
			break
		}
		if !errors.Is(err, ports.ErrNoSubscriber) && !errors.Is(err, ports.ErrUnconfirmed) || ctx.Err() != nil {
			t.Fatalf("Send after the restart: %v (want nil once the subscription is back, ErrNoSubscriber or ErrUnconfirmed before)", err)
		}
		select {
		case <-time.After(50 * time.Millisecond): // retry pacing
		case <-ctx.Done():
		}
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil || len(ds) == 0 {
		t.Fatalf("the message stored after the restart was not received within 60s: %v", err)
	}
	if n := refused.Load(); n < 3 {
		t.Fatalf("the broker saw %d SUBSCRIBEs, want at least 3 (two refused, then one allowed)", n)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil && !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Settle: %v", err)
	}
}
