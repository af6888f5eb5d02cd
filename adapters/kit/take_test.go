package kit_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestTake: Take waits for one value, takes what else is there up to max
// without waiting, reports a closed channel after its last values, and
// returns ctx's error when nothing came.
func TestTake(t *testing.T) {
	c := make(chan int, 8)
	for i := range 5 {
		c <- i
	}
	if got, open, err := kit.Take(context.Background(), c, 3, nil); !slices.Equal(got, []int{0, 1, 2}) || !open || err != nil {
		t.Fatalf("max 3: %v %v %v", got, open, err)
	}
	if got, open, err := kit.Take(context.Background(), c, 8, nil); !slices.Equal(got, []int{3, 4}) || !open || err != nil {
		t.Fatalf("what is there: %v %v %v", got, open, err)
	}
	c <- 5
	close(c)
	if got, open, _ := kit.Take(context.Background(), c, 8, nil); !slices.Equal(got, []int{5}) || open {
		t.Fatalf("closed after one: %v %v", got, open)
	}
	if got, open, _ := kit.Take(context.Background(), c, 8, nil); len(got) != 0 || open {
		t.Fatalf("closed: %v %v", got, open)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, _, err := kit.Take(ctx, make(chan int), 8, nil); len(got) != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v %v", got, err)
	}
}

func TestPollTakesWithoutWaiting(t *testing.T) {
	c := make(chan int, 1)
	if v, ok := kit.Poll(c); ok || v != 0 {
		t.Fatalf("Poll of an empty channel = %d, %v; want 0, false", v, ok)
	}
	c <- 7
	if v, ok := kit.Poll(c); !ok || v != 7 {
		t.Fatalf("Poll = %d, %v; want 7, true", v, ok)
	}
	close(c)
	if _, ok := kit.Poll(c); ok {
		t.Fatal("Poll of a closed channel reported a value")
	}
}
