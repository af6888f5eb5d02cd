package kit_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

type batches struct {
	mu sync.Mutex
	b  [][]int
	ch chan struct{}
}

func (r *batches) fn(_ context.Context, items []int) error {
	r.mu.Lock()
	r.b = append(r.b, slices.Clone(items))
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
	return nil
}

func (r *batches) get() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.b)
}

func TestCoalescerFlushesAtMax(t *testing.T) {
	r := &batches{ch: make(chan struct{}, 1)}
	c := kit.NewCoalescer(kit.CoalescerOptions{Max: 3}, r.fn)
	ctx := context.Background()
	for i := range 7 {
		if err := c.Add(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.get(); len(got) != 2 || !slices.Equal(got[0], []int{0, 1, 2}) || !slices.Equal(got[1], []int{3, 4, 5}) {
		t.Fatalf("batches = %v", got)
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d, want 1", c.Len())
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.get(); len(got) != 3 || !slices.Equal(got[2], []int{6}) {
		t.Fatalf("after Flush: %v", got)
	}
	if err := c.Flush(ctx); err != nil || len(r.get()) != 3 {
		t.Fatal("an empty Flush must not call fn")
	}
}

func TestCoalescerFlushesAfterLinger(t *testing.T) {
	r := &batches{ch: make(chan struct{}, 1)}
	c := kit.NewCoalescer(kit.CoalescerOptions{Max: 100, Linger: time.Millisecond}, r.fn)
	defer c.Close(context.Background())
	_ = c.Add(context.Background(), 1, 2)
	select {
	case <-r.ch:
	case <-time.After(wait):
		t.Fatal("linger did not flush within 5s")
	}
	if got := r.get(); len(got) != 1 || !slices.Equal(got[0], []int{1, 2}) {
		t.Fatalf("batches = %v", got)
	}
	// The timer re-arms for the next item.
	_ = c.Add(context.Background(), 3)
	select {
	case <-r.ch:
	case <-time.After(wait):
		t.Fatal("second linger did not flush within 5s")
	}
}

func TestCoalescerReturnsFlushErrorAndCloses(t *testing.T) {
	boom := errors.New("boom")
	c := kit.NewCoalescer(kit.CoalescerOptions{Max: 2}, func(context.Context, []int) error { return boom })
	ctx := context.Background()
	_ = c.Add(ctx, 1)
	if err := c.Add(ctx, 2); !errors.Is(err, boom) {
		t.Fatalf("Add at Max = %v, want boom", err)
	}
	_ = c.Add(ctx, 3)
	if err := c.Close(ctx); !errors.Is(err, boom) {
		t.Fatalf("Close = %v, want the final flush's error", err)
	}
	if err := c.Add(ctx, 4); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Add after Close = %v, want ErrClosed", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestCoalescerConcurrentAddsKeepEveryItemOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	c := kit.NewCoalescer(kit.CoalescerOptions{Max: 16, Linger: time.Millisecond}, func(_ context.Context, items []int) error {
		mu.Lock()
		for _, v := range items {
			seen[v]++
		}
		mu.Unlock()
		return nil
	})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				_ = c.Add(context.Background(), g*1000+i)
			}
		}()
	}
	wg.Wait()
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 4000 {
		t.Fatalf("flushed %d distinct items, want 4000", len(seen))
	}
	for v, n := range seen {
		if n != 1 {
			t.Fatalf("item %d flushed %d times", v, n)
		}
	}
}
