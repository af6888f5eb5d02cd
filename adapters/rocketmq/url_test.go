package rocketmq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	_ "github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/ports"
)

func TestOpenURL(t *testing.T) {
	b, err := rocketmqtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	a, err := adapters.Open(ctx, "rocketmq://"+b.Endpoint()+"?invisible=15s&max_lease=0&await=2s&insecure=true", adapters.NotExclusive())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if got := adapters.Unwrap(a).Name(); got != "rocketmq" {
		t.Fatalf("opened %q, want rocketmq", got)
	}
	_ = a.Close(ctx)
	for _, bad := range []string{"rocketmq://127.0.0.1:8081?bogus=1", "rocketmq://127.0.0.1:8081?invisible=1ms", "rocketmq://127.0.0.1:8081?max_lease=-1s", "rocketmq:///"} {
		if _, err := adapters.Open(ctx, bad, adapters.NotExclusive()); err == nil || !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want an ErrInvalid error", bad, err)
		}
	}
}
