package kit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

type stamped struct {
	name string
	at   int // seconds
}

// sendAll sends each partition's records, a batch a partition, as one
// sender goroutine does.
func sendAll(f *kit.Feed[string], parts ...[]stamped) {
	for _, recs := range parts {
		f.Reserve(len(recs))
		f.Send(len(recs), func(i int) (string, time.Time) { return recs[i].name, time.Unix(int64(recs[i].at), 0) })
	}
}

func takeAll(f *kit.Feed[string], room int) []string {
	var got []string
	f.Take(room, func(s *string) { got = append(got, *s) })
	return got
}

func TestFeedMergesByTimeAndKeepsEachPartitionsOrder(t *testing.T) {
	f := kit.NewFeed[string](100)
	sendAll(f,
		[]stamped{{"a0", 10}, {"a1", 10}, {"a2", 20}}, // a1's producer clock went back: its partition's latest so far
		[]stamped{{"b0", 7}, {"b1", 15}})
	if got, want := takeAll(f, 100), []string{"b0", "a0", "a1", "b1", "a2"}; !slices.Equal(got, want) {
		t.Fatalf("took %q, want %q (a1 stays after a0)", got, want)
	}
}

func TestFeedHandsOverBatchesUpToRoom(t *testing.T) {
	f := kit.NewFeed[string](150)
	recs := make([]stamped, 150)
	for i := range recs {
		recs[i] = stamped{string(rune('0' + i%10)), i}
	}
	sendAll(f, recs) // batches of 64, 64 and 22
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

func TestFeedRoomWaitsForTheReceiver(t *testing.T) {
	f := kit.NewFeed[string](10)
	if n := f.Room(context.Background()); n != 10 {
		t.Fatalf("Room of an empty feed of 10 = %d", n)
	}
	sendAll(f, make([]stamped, 10))
	got := make(chan int, 1)
	go func() { got <- f.Room(context.Background()) }()
	select {
	case n := <-got:
		t.Fatalf("Room of a full feed returned %d without waiting", n)
	default:
	}
	if took := takeAll(f, 3); len(took) != 10 {
		t.Fatalf("took %d records, want the 10 sent (one batch)", len(took))
	}
	select {
	case n := <-got:
		if n != 10 {
			t.Fatalf("Room after the receiver took everything = %d, want 10", n)
		}
	case <-time.After(wait):
		t.Fatalf("Room still waiting %v after the receiver took every record", wait)
	}
	sendAll(f, make([]stamped, 10))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n := f.Room(ctx); n != 0 {
		t.Fatalf("Room of a full feed with its context done = %d, want 0", n)
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

// Every time a Kafka record can carry orders as time does, from none yet
// (zero) to the last millisecond of its range; records within one
// millisecond keep the order they were sent in.
func TestFeedOrdersEveryKafkaTime(t *testing.T) {
	f := kit.NewFeed[string](100)
	send := func(names []string, ats ...time.Time) {
		f.Reserve(len(names))
		f.Send(len(names), func(i int) (string, time.Time) { return names[i], ats[i] })
	}
	ms := time.UnixMilli(1_700_000_000_000)
	send([]string{"late", "end"}, time.UnixMilli(1<<62), time.UnixMilli(1<<63-1))
	send([]string{"none", "first", "same-ms"}, time.Time{}, ms.Add(900*time.Microsecond), ms.Add(900*time.Microsecond))
	send([]string{"early-in-ms"}, ms)
	if got, want := takeAll(f, 100), []string{"none", "first", "same-ms", "early-in-ms", "late", "end"}; !slices.Equal(got, want) {
		t.Fatalf("took %q, want %q", got, want)
	}
}
