package kit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

func TestDelayerRunsInDueOrder(t *testing.T) {
	d := kit.NewDelayer(kit.DelayerOptions{})
	defer d.Stop()
	got := make(chan int, 3)
	for _, v := range []int{30, 10, 20} {
		if err := d.After(time.Duration(v)*time.Millisecond, func(context.Context) { got <- v }); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{10, 20, 30} {
		select {
		case v := <-got:
			if v != want {
				t.Fatalf("ran %d, want %d", v, want)
			}
		case <-time.After(wait):
			t.Fatalf("%d did not run within 5s", want)
		}
	}
}

func TestDelayerStopCancelsPending(t *testing.T) {
	d := kit.NewDelayer(kit.DelayerOptions{})
	ran := make(chan struct{}, 1)
	for range 5 {
		_ = d.After(time.Hour, func(context.Context) { ran <- struct{}{} })
	}
	if d.Pending() != 5 {
		t.Fatalf("Pending = %d", d.Pending())
	}
	if n := d.Stop(); n != 5 {
		t.Fatalf("Stop cancelled %d, want 5", n)
	}
	if err := d.After(0, func(context.Context) {}); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("After after Stop = %v", err)
	}
	if d.Stop() != 0 {
		t.Fatal("second Stop must return 0")
	}
	select {
	case <-ran:
		t.Fatal("a cancelled item ran")
	default:
	}
}

func TestDelayerStopCancelsRunningContext(t *testing.T) {
	d := kit.NewDelayer(kit.DelayerOptions{})
	started := make(chan struct{})
	var seen error // written by the item before Stop returns
	if err := d.After(0, func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		seen = ctx.Err()
	}); err != nil {
		t.Fatalf("After: %v", err)
	}
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the item did not start within 5s")
	}
	stopped := make(chan int, 1)
	go func() { stopped <- d.Stop() }()
	select {
	case n := <-stopped:
		if n != 0 {
			t.Fatalf("Stop cancelled %d pending item(s), want 0 (the only one was running)", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return within 5s: the running item's context was not cancelled")
	}
	if !errors.Is(seen, context.Canceled) {
		t.Fatalf("the running item's context ended with %v, want context.Canceled", seen)
	}
}
