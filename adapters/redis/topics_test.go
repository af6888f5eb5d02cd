package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/ports"
)

// TestDeclaredLengthTrimsInEveryProcess: a topic declared with MaxLength
// by one adapter is trimmed by the XADDs of another adapter (another
// process) that never declared it, and that adapter declaring it with
// another length is refused with a RedeclareError and changes nothing.
func TestDeclaredLengthTrimsInEveryProcess(t *testing.T) {
	ns := namespace("trim")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := newAdapter(t, redis.Options{Namespace: ns})
	b := newAdapter(t, redis.Options{Namespace: ns})
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "t", MaxLength: 3}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := b.Send(ctx, ports.Message{Topic: "t", Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	rc := goredis.NewClient(&goredis.Options{Addr: redistest.Shared(t).Addr, Protocol: 2})
	defer rc.Close()
	if n, err := rc.XLen(ctx, ns+":stream:t").Result(); err != nil || n != 3 {
		t.Fatalf("XLEN %d (%v) after 10 sends by an adapter that did not declare the topic, want 3", n, err)
	}
	var re *ports.RedeclareError
	if err := ports.DeclareTopic(ctx, b, ports.TopicSpec{Topic: "t", MaxLength: 5}); !errors.As(err, &re) || !strings.Contains(err.Error(), "max_length: existing 3, declared 5") {
		t.Fatalf("another length: %v", err)
	}
}

// TestOversizedPayloadIsASizeError: above MaxMessageBytes nothing is
// written.
func TestOversizedPayloadIsASizeError(t *testing.T) {
	a := newAdapter(t, redis.Options{MaxMessageBytes: 1000})
	err := a.Send(context.Background(), ports.Message{Topic: "big", Payload: make([]byte, 1001)})
	var se *ports.SizeError
	if !errors.As(err, &se) || errors.Is(err, ports.ErrUnconfirmed) || se.Limit != 1000 {
		t.Fatalf("oversized Send: %v", err)
	}
}
