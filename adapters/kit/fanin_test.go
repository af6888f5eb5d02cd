package kit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

func TestFaninPollAndWait(t *testing.T) {
	f := kit.NewFanin[string, int]()
	a, b := make(chan int, 4), make(chan int, 4)
	f.Add("a", a)
	f.Add("b", b)
	a <- 1
	a <- 2
	b <- 3
	got := f.Poll(nil, 2)
	if len(got) != 2 {
		t.Fatalf("Poll(max 2) = %v", got)
	}
	got = f.Poll(got, 10)
	if len(got) != 3 || got[2].Tag != "b" || got[2].Value != 3 {
		t.Fatalf("Poll = %v, want 1 and 2 from a, 3 from b", got)
	}
	if more := f.Poll(nil, 10); len(more) != 0 {
		t.Fatalf("Poll with nothing buffered = %v", more)
	}

	// Wait keeps the value it receives for the next Poll.
	if err := f.Wait(t.Context(), false, nil, nil); err != nil { // the Adds changed the set
		t.Fatal(err)
	}
	go func() { b <- 4 }()
	if err := f.Wait(t.Context(), true, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := f.Poll(nil, 0); len(got) != 1 || got[0] != (kit.Tagged[string, int]{Tag: "b", Value: 4}) {
		t.Fatalf("after Wait, Poll = %v, want 4 from b", got)
	}

	// Remove stops the channel; a closed channel leaves the set.
	f.Remove("a")
	a <- 5
	close(b)
	if got := f.Poll(nil, 10); len(got) != 0 {
		t.Fatalf("after Remove and close, Poll = %v", got)
	}
	c := make(chan int, 1)
	c <- 6
	f.Add("c", c)
	if got := f.Poll(nil, 10); len(got) != 1 || got[0].Tag != "c" {
		t.Fatalf("Poll = %v, want 6 from c only", got)
	}
}

func TestFaninWaitEnds(t *testing.T) {
	f := kit.NewFanin[string, int]()
	ch := make(chan int, 1)
	f.Add("a", ch)
	ch <- 1
	wake, failed := make(chan struct{}, 1), make(chan error, 1)

	if err := f.Wait(t.Context(), false, nil, nil); err != nil { // the set changed (Add)
		t.Fatal(err)
	}
	wake <- struct{}{}
	if err := f.Wait(t.Context(), false, wake, failed); err != nil { // receive false: ch is not read
		t.Fatal(err)
	}
	if got := f.Poll(nil, 10); len(got) != 1 || got[0].Value != 1 {
		t.Fatalf("Poll = %v, want the value Wait did not take", got)
	}
	boom := errors.New("session failed")
	failed <- boom
	if err := f.Wait(t.Context(), true, wake, failed); !errors.Is(err, boom) {
		t.Fatalf("Wait = %v, want the failure", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := f.Wait(ctx, true, wake, failed); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}
