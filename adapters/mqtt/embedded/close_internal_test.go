package embedded

import (
	"strings"
	"testing"
	"time"
)

// A mochi Server.Close that never returns must not hang Close (it once
// hung a test for 10 minutes).
func TestCloseIsBounded(t *testing.T) {
	b, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	real := b.serverClose
	defer func() { _ = real() }()
	block := make(chan struct{})
	defer close(block)
	b.serverClose = func() error { <-block; return nil }
	old := closeTimeout
	closeTimeout = 50 * time.Millisecond
	defer func() { closeTimeout = old }()

	returned := make(chan error, 1)
	go func() { returned <- b.Close() }()
	select {
	case err := <-returned:
		if err == nil || !strings.Contains(err.Error(), "did not stop within") {
			t.Fatalf("Close = %v, want an error saying the broker did not stop in time", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s with a 50ms bound")
	}
}
