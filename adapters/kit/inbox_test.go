package kit_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

const wait = 5 * time.Second

func TestInboxReceiveBlocksUntilPush(t *testing.T) {
	in := kit.NewInbox[int](0)
	got := make(chan []int, 1)
	go func() {
		v, err := in.Receive(context.Background(), 10)
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	select {
	case v := <-got:
		t.Fatalf("Receive returned %v before any Push", v)
	default:
	}
	if err := in.Push(context.Background(), 1, 2, 3); err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if len(v) == 0 || v[0] != 1 {
			t.Fatalf("Receive = %v, want a prefix of [1 2 3]", v)
		}
	case <-time.After(wait):
		t.Fatal("Receive did not return after Push")
	}
}

func TestInboxReceiveMaxAndOrder(t *testing.T) {
	in := kit.NewInbox[int](0)
	ctx := context.Background()
	if err := in.Push(ctx, 1, 2, 3, 4, 5); err != nil {
		t.Fatal(err)
	}
	a, _ := in.Receive(ctx, 2)
	if !slices.Equal(a, []int{1, 2}) {
		t.Fatalf("first Receive = %v", a)
	}
	if err := in.PushFront(a...); err != nil {
		t.Fatal(err)
	}
	if in.Len() != 5 {
		t.Fatalf("Len = %d, want 5", in.Len())
	}
	b, _ := in.Receive(ctx, 0) // max < 1 is 1
	if !slices.Equal(b, []int{1}) {
		t.Fatalf("Receive(0) = %v, want [1]", b)
	}
	c, _ := in.Receive(ctx, 100)
	if !slices.Equal(c, []int{2, 3, 4, 5}) {
		t.Fatalf("Receive(100) = %v", c)
	}
}

func TestInboxReceiveHonoursContext(t *testing.T) {
	in := kit.NewInbox[int](0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := in.Receive(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive on a cancelled ctx = %v, want context.Canceled", err)
	}
}

func TestInboxBoundedPushBlocksUntilRoom(t *testing.T) {
	in := kit.NewInbox[int](2)
	ctx := context.Background()
	if err := in.Push(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := in.Push(short, 3); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Push into a full inbox = %v, want DeadlineExceeded", err)
	}
	pushed := make(chan error, 1)
	go func() { pushed <- in.Push(ctx, 3, 4) }()
	got, _ := in.Receive(ctx, 1)
	if !slices.Equal(got, []int{1}) {
		t.Fatalf("Receive = %v", got)
	}
	var all []int
	for len(all) < 3 {
		v, err := in.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, v...)
		if in.Len() > 2 {
			t.Fatalf("Len %d exceeds the bound 2", in.Len())
		}
	}
	if !slices.Equal(all, []int{2, 3, 4}) {
		t.Fatalf("received %v, want [2 3 4]", all)
	}
	select {
	case err := <-pushed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("blocked Push did not finish")
	}
}

func TestInboxCloseReturnsRestAndUnblocks(t *testing.T) {
	in := kit.NewInbox[int](1)
	ctx := context.Background()
	_ = in.Push(ctx, 7)
	blocked := make(chan error, 1)
	go func() { blocked <- in.Push(ctx, 8) }()
	rest := in.Close()
	if !slices.Equal(rest, []int{7}) {
		t.Fatalf("Close = %v, want [7]", rest)
	}
	select {
	case err := <-blocked:
		if !errors.Is(err, ports.ErrClosed) {
			t.Fatalf("blocked Push after Close = %v, want ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("Close did not unblock Push")
	}
	if _, err := in.Receive(ctx, 1); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Receive after Close = %v", err)
	}
	if err := in.PushFront(1); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("PushFront after Close = %v", err)
	}
	if in.Close() != nil {
		t.Fatal("second Close must return nil")
	}
}
