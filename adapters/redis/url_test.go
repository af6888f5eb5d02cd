package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/ports"
)

func TestOpenURL(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := adapters.Open(ctx, "redis://"+srv.Addr+"/0?durability=fsync&claim_min_idle=5s&namespace="+namespace("url"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer a.Close(ctx)
	if a.Name() != "redis" {
		t.Fatalf("Name %q", a.Name())
	}
	if err := a.Send(ctx, ports.Message{Topic: "url.t", Payload: []byte(`{}`)}); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

func TestOpenURLErrors(t *testing.T) {
	ctx := context.Background()
	for url, want := range map[string]string{
		"redis://127.0.0.1:1/0?durability=maybe": "durability",
		"redis://127.0.0.1:1/x":                  "database number",
		"redis://127.0.0.1:1/0?bogus=1":          "bogus",
	} {
		_, err := adapters.Open(ctx, url)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%s) = %v, want an error naming %q", url, err, want)
		}
	}
	_, err := adapters.Open(ctx, "redis://127.0.0.1:1/0?dial_timeout=100ms")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Open of a closed port = %v, want an error naming the address", err)
	}
	if errors.Is(err, ports.ErrInvalid) || !errors.Is(err, ports.ErrRefused) {
		t.Fatalf("a refused connection is ports.ErrRefused, not ErrInvalid: %v", err)
	}
}

// TestDurabilityFsyncChecksServer: the default fsync level refuses a
// server without appendfsync always, and durability=none accepts it.
func TestDurabilityFsyncChecksServer(t *testing.T) {
	srv := redistest.Own(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := adapters.Open(ctx, "redis://"+srv.Addr+"/0")
	if err == nil || !strings.Contains(err.Error(), "appendonly yes") {
		t.Fatalf("Open with fsync on a non-persistent server = %v, want an error naming appendonly yes", err)
	}
	a, err := adapters.Open(ctx, "redis://"+srv.Addr+"/0?durability=none")
	if err != nil {
		t.Fatalf("Open durability=none: %v", err)
	}
	_ = a.Close(ctx)
}

// TestDurabilityReplicasWithoutReplica: WAIT 1 on a server with no replica
// times out, and Send reports every message unconfirmed.
func TestDurabilityReplicasWithoutReplica(t *testing.T) {
	srv := redistest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := adapters.Open(ctx, "redis://"+srv.Addr+"/0?durability=replicas&replicas=1&wait_timeout=50ms&namespace="+namespace("wait"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer a.Close(ctx)
	err = a.Send(ctx, ports.Message{Topic: "w", Payload: []byte(`1`)}, ports.Message{Topic: "w", Payload: []byte(`2`)})
	if !errors.Is(err, ports.ErrUnconfirmed) || !strings.Contains(err.Error(), "#1") {
		t.Fatalf("Send = %v, want both messages unconfirmed", err)
	}
}
