package amqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
)

// namespace returns a fresh namespace, so tests sharing one node never
// meet.
func namespace(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// newAdapter makes an adapter on the shared node (or url) and closes it at
// the end of t.
func newAdapter(t testing.TB, o amqp.Options) *amqp.Adapter {
	t.Helper()
	if o.URL == "" {
		o.URL = rabbittest.Shared(t).URL
	}
	if o.Namespace == "" {
		o.Namespace = namespace("t")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := amqp.New(ctx, o)
	if err != nil {
		t.Fatalf("amqp.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return a
}
