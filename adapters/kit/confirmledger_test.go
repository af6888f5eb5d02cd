package kit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestConfirmLedgerResolvesInPublishOrder: confirms resolve the publishes up to
// their number with the result of each (a marked return fails its own
// publish only), a failed write is not registered, and Fail resolves
// every outstanding publish and refuses later ones.
func TestConfirmLedgerResolvesInPublishOrder(t *testing.T) {
	ctx := context.Background()
	c := kit.NewConfirmLedger[string](8, 1)
	r := kit.NewConfirms(5)
	broken := errors.New("write failed")
	for i, name := range []string{"a", "b", "c", "d", "e"} {
		write := func() error { return nil }
		if name == "c" {
			write = func() error { return broken }
		}
		if err := c.Publish(ctx, r, i, name, write); name == "c" && !errors.Is(err, broken) || name != "c" && err != nil {
			t.Fatalf("publish %s: %v", name, err)
		}
	}
	r.Resolve(2, broken) // the caller resolves what was not written
	returned := errors.New("returned")
	c.Mark(func(v *string) bool {
		if *v == "b" {
			*v = "b returned"
			return true
		}
		return false
	})
	result := func(v *string) error {
		if *v == "b returned" {
			return returned
		}
		return nil
	}
	c.Confirm(2, result) // a and b: "c" took no number, so "d" is 3
	c.Confirm(3, result)
	lost := errors.New("channel lost")
	c.Fail(lost)
	errs := r.Wait(ctx, 0)
	if errs[0] != nil || !errors.Is(errs[1], returned) || !errors.Is(errs[2], broken) || errs[3] != nil || !errors.Is(errs[4], lost) {
		t.Fatalf("got %v", errs)
	}
	if err := c.Publish(ctx, kit.NewConfirms(1), 0, "f", func() error { return nil }); !errors.Is(err, lost) || !errors.Is(c.Err(), lost) {
		t.Fatalf("publish after Fail: %v (Err %v), want the failure", err, c.Err())
	}
}

// TestConfirmLedgerBoundsOutstanding: Publish waits while max publishes are
// outstanding, until a confirm frees room or ctx ends.
func TestConfirmLedgerBoundsOutstanding(t *testing.T) {
	c := kit.NewConfirmLedger[int](2, 1)
	r := kit.NewConfirms(3)
	ok := func() error { return nil }
	for i := range 2 {
		if err := c.Publish(context.Background(), r, i, i, ok); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Publish(ctx, r, 2, 2, ok); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third publish at the bound: %v, want it to wait until ctx ended", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := c.Publish(context.Background(), r, 2, 2, ok); err != nil {
			t.Error(err)
		}
	})
	c.Confirm(1, func(*int) error { return nil })
	wg.Wait()
	c.Confirm(3, func(*int) error { return nil })
	if errs := r.Wait(context.Background(), 0); errs != nil {
		t.Fatal(errs)
	}
}
