package redis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
)

// namespace returns a fresh key namespace, so tests sharing a server never
// meet.
func namespace(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// newAdapter makes an adapter on the shared durable server (or o.Addr) and
// closes it at the end of t.
func newAdapter(t testing.TB, o redis.Options) *redis.Adapter {
	t.Helper()
	if o.Addr == "" {
		o.Addr = redistest.Shared(t).Addr
	}
	if o.Namespace == "" {
		o.Namespace = namespace("t")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := redis.New(ctx, o)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}

func sharedAddr(t testing.TB) string { return redistest.Shared(t).Addr }
