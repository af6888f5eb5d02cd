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
	_ = d.After(0, func(ctx context.Context) {
		close(started)
		<-ctx.Done()
	})
	<-started
	d.Stop() // returns only because the running item saw its ctx cancelled
}
