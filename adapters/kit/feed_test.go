package kit_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

type stamped struct {
	name string
	at   int // seconds
}

// pumpAll runs a Pump per partition over a closed channel holding its
// records and returns once every Pump has handed them all over.
func pumpAll(f *kit.Feed[string], parts ...[]stamped) {
	var wg sync.WaitGroup
	for _, recs := range parts {
		in := make(chan stamped, len(recs))
		for _, r := range recs {
			in <- r
		}
		close(in)
		wg.Go(func() {
			kit.Pump(f, in, nil, nil, func(r stamped, _ time.Time) (string, time.Time) { return r.name, time.Unix(int64(r.at), 0) })
		})
	}
	wg.Wait()
}

func takeAll(f *kit.Feed[string], room int) []string {
	var got []string
	f.Take(room, func(s string) { got = append(got, s) })
	return got
}

func TestFeedMergesByTimeAndKeepsEachPartitionsOrder(t *testing.T) {
	f := kit.NewFeed[string](4)
	pumpAll(f,
		[]stamped{{"a0", 10}, {"a1", 5}, {"a2", 20}}, // a producer's clock went back
		[]stamped{{"b0", 7}, {"b1", 15}})
	if got, want := takeAll(f, 100), []string{"b0", "a0", "a1", "b1", "a2"}; !slices.Equal(got, want) {
		t.Fatalf("took %q, want %q (a1 stays after a0)", got, want)
	}
}

func TestFeedHandsOverBatchesUpToRoom(t *testing.T) {
	f := kit.NewFeed[string](4)
	recs := make([]stamped, 150)
	for i := range recs {
		recs[i] = stamped{string(rune('0' + i%10)), i}
	}
	pumpAll(f, recs) // batches of 64, 64 and 22: all were in the channel
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := f.Wait(ctx, true, nil, nil); err != nil {
		t.Fatalf("wait for a batch: %v", err)
	}
	if got := takeAll(f, 1); len(got) != kit.FeedBatch {
		t.Fatalf("room 1 with a batch received took %d records, want that batch's %d", len(got), kit.FeedBatch)
	}
	if got := takeAll(f, 0); len(got) != 0 {
		t.Fatalf("room 0 took %d records", len(got))
	}
	if got := takeAll(f, 1000); len(got) != 150-kit.FeedBatch {
		t.Fatalf("took %d records, want the other %d", len(got), 150-kit.FeedBatch)
	}
}

func TestPumpEndsWhenDoneOrStopped(t *testing.T) {
	for _, which := range []string{"done", "stop"} {
		f := kit.NewFeed[string](1)
		in := make(chan stamped, 200)
		for i := range 200 {
			in <- stamped{"r", i}
		}
		done, stop := make(chan struct{}), make(chan struct{})
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			kit.Pump(f, in, done, stop, func(r stamped, _ time.Time) (string, time.Time) { return r.name, time.Time{} })
		}()
		if which == "done" {
			close(done)
		} else {
			close(stop)
		}
		select {
		case <-ended:
		case <-time.After(wait):
			t.Fatalf("Pump still running %v after %s was closed (the feed full, the channel open)", wait, which)
		}
	}
}

func TestFeedWaitReturnsFailureAndContext(t *testing.T) {
	f := kit.NewFeed[string](1)
	failed := make(chan error, 1)
	failed <- errors.New("session failed")
	if err := f.Wait(context.Background(), true, nil, failed); err == nil || err.Error() != "session failed" {
		t.Fatalf("Wait = %v, want the failure", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Wait(ctx, false, nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}
