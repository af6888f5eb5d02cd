package redistest

import (
	"context"
	"testing"
)

func TestStartRestartStop(t *testing.T) {
	s := Own(t, Options{Durable: true})
	if err := ping(s.Addr); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := ping(s.Addr); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
}
