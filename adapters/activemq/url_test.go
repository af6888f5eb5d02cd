package activemq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// activemq:// through the scheme registry, against the package's broker.
func TestOpenURL(t *testing.T) {
	b := activemqtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := "activemq://" + b.StompAddr + "?namespace=" + namespace("url") + "&publish_conns=2&heartbeat=5s"
	a, err := adapters.Open(ctx, raw, adapters.WithCredentials("user", "secret"))
	if err != nil {
		t.Fatalf("Open(%q): %v", raw, err)
	}
	defer a.Close(context.Background())
	if _, ok := adapters.Unwrap(a).(*activemq.Adapter); !ok || a.Name() != "activemq" {
		t.Fatalf("Open = %T %q", adapters.Unwrap(a), a.Name())
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "greetings", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	if err := flow.Send(ctx, a, "greetings", "hello"); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || string(ds[0].Payload) != `"hello"` {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

// Bad URLs fail with ErrInvalid before anything is dialled.
func TestOpenURLInvalid(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{
		"activemq://",
		"activemq://127.0.0.1",
		"activemq://127.0.0.1:61613/vhost",
		"activemq://127.0.0.1:61613?publish_conns=0",
		"activemq://127.0.0.1:61613?unknown=1",
		"activemq://127.0.0.1:61613?heartbeat=10ms",
	} {
		if a, err := adapters.Open(ctx, raw); !errors.Is(err, ports.ErrInvalid) {
			if a != nil {
				a.Close(ctx)
			}
			t.Errorf("Open(%q) = %v, want ErrInvalid", raw, err)
		}
	}
}

// A closed port fails at once with ports.ErrRefused, naming the address.
func TestOpenURLUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := adapters.Open(ctx, "activemq://127.0.0.1:1?dial_timeout=5s")
	if err == nil || !contains(err.Error(), "127.0.0.1:1") || !errors.Is(err, ports.ErrRefused) {
		t.Fatalf("Open of a closed port = %v, want ports.ErrRefused naming the address", err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("Open of a closed port took %v: a refused connect must fail at once, not after the dial timeout", took)
	}
}
