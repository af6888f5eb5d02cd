package kit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

// fetches is a broker with a backlog: each fetch brings all it asks for.
type fetches struct {
	wants chan int
	held  atomic.Int64
	err   error
}

func (f *fetches) fetch(_ context.Context, want int) ([]int, error) {
	f.wants <- want
	if f.err != nil {
		return nil, f.err
	}
	f.held.Add(int64(want))
	return make([]int, want), nil
}

func (f *fetches) next(t *testing.T, want int) {
	t.Helper()
	if got := within(t, f.wants, "fetch"); got != want {
		t.Fatalf("a fetch asked for %d, want %d", got, want)
	}
}

// within returns the next value of c, failing t when none comes within
// wait.
func within[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	var v T
	select {
	case v = <-c:
	case <-time.After(wait):
		t.Fatalf("no %s within %v", what, wait)
	}
	return v
}

func receive(t *testing.T, p *kit.Prefetcher[int], max, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if got, err := p.Receive(ctx, max); len(got) != want || err != nil {
		t.Fatalf("Receive(%d) = %d record(s), %v; want %d", max, len(got), err, want)
	}
}

// TestPrefetcherWindow: the first fetch asks for the in-flight window; a
// full fetch while nothing was settled leaves the window; a full one after
// settlements doubles it, and the doubled window is prefetched without a
// receive waiting; the prefetch, full but with nothing settled since,
// sets it back, and nothing more is fetched until a receive finds the
// buffer empty.
func TestPrefetcherWindow(t *testing.T) {
	f := &fetches{wants: make(chan int, 8)}
	p := kit.NewPrefetcher(kit.PrefetchOptions[int]{Fetch: f.fetch, Held: func() int { return int(f.held.Load()) },
		InFlight: 2, Max: 8, Grow: true, Linger: time.Millisecond}, nil)
	defer p.Stop()
	receive(t, p, 10, 2)
	f.next(t, 2)
	f.held.Add(-2)
	p.Settled(2)
	receive(t, p, 2, 2)
	f.next(t, 2)
	f.next(t, 4) // prefetched
	receive(t, p, 10, 4)
	receive(t, p, 1, 1)
	f.next(t, 2)
	if len(f.wants) != 0 {
		t.Fatalf("fetched %d more, want none", <-f.wants)
	}
}

// TestPrefetcherNoGrow: without Grow a fetch asks for the receiver's max,
// and what it brings beyond one receive is handed out by the next; the
// buffer given to NewPrefetcher comes first; a failed fetch's error goes to
// the waiting receive; Idle runs after a settlement left nothing to fetch.
func TestPrefetcherNoGrow(t *testing.T) {
	f := &fetches{wants: make(chan int, 8)}
	idle := make(chan struct{}, 1)
	p := kit.NewPrefetcher(kit.PrefetchOptions[int]{Fetch: f.fetch, Held: func() int { return int(f.held.Load()) },
		InFlight: 2, Max: 8, Idle: func(context.Context) { kit.Signal(idle) }, Linger: time.Millisecond}, []int{7})
	defer p.Stop()
	receive(t, p, 5, 1)
	receive(t, p, 3, 3)
	f.next(t, 3)
	p.Settled(3)
	within(t, idle, "Idle after a settlement")
	f.err = errors.New("boom") // no fetch is in flight: the buffer was empty and nothing waits
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if got, err := p.Receive(ctx, 1); len(got) != 0 || !errors.Is(err, f.err) {
		t.Fatalf("Receive after a failed fetch = %v, %v; want boom", got, err)
	}
}

// TestPrefetcherHandsOutWhatAFetchReturned: a receive gets the records of
// one fetch at a time, in order, in the fetch's own slice (a fetch of
// hundreds of records is not copied on its way to the receiver).
func TestPrefetcherHandsOutWhatAFetchReturned(t *testing.T) {
	fetched := make(chan []int, 1)
	p := kit.NewPrefetcher(kit.PrefetchOptions[int]{Fetch: func(_ context.Context, want int) ([]int, error) {
		recs := []int{10, 11, 12}
		fetched <- recs
		return recs, nil
	}, Held: func() int { return 0 }, InFlight: 3, Max: 3}, []int{1, 2})
	defer p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	first, err := p.Receive(ctx, 10)
	if err != nil || len(first) != 2 || first[0] != 1 || first[1] != 2 {
		t.Fatalf("first Receive = %v, %v; want the buffer given to NewPrefetcher, [1 2]", first, err)
	}
	part, err := p.Receive(ctx, 2)
	recs := within(t, fetched, "fetch")
	if err != nil || len(part) != 2 || &part[0] != &recs[0] || part[1] != 11 {
		t.Fatalf("Receive(2) = %v, %v; want [10 11] in the fetch's own slice", part, err)
	}
	if rest, err := p.Receive(ctx, 10); err != nil || len(rest) != 1 || &rest[0] != &recs[2] {
		t.Fatalf("Receive(10) = %v, %v; want [12] in the fetch's own slice", rest, err)
	}
}
