package kit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestAwait(t *testing.T) {
	v, err := kit.Await(context.Background(), func() (int, error) { return 7, nil }, nil)
	if v != 7 || err != nil {
		t.Fatalf("Await = %d, %v, want 7, nil", v, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	release, late := make(chan struct{}), make(chan int, 1)
	go cancel()
	v, err = kit.Await(ctx, func() (int, error) { <-release; return 9, nil }, func(v int, _ error) { late <- v })
	if v != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Await after cancel = %d, %v, want 0, context.Canceled", v, err)
	}
	close(release)
	if got := <-late; got != 9 {
		t.Fatalf("late got %d, want 9", got)
	}
}
