package kit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

func TestConfirmsAllConfirmed(t *testing.T) {
	c := kit.NewConfirms(50)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { c.Resolve(i, nil) })
	}
	if errs := c.Wait(context.Background(), 0); errs != nil {
		t.Fatalf("every message confirmed: got %v, want nil", errs)
	}
	wg.Wait()
	if errs := kit.NewConfirms(0).Wait(context.Background(), 0); errs != nil {
		t.Fatalf("no messages: got %v, want nil", errs)
	}
}

func TestConfirmsFirstResultCounts(t *testing.T) {
	refused := errors.New("refused")
	c := kit.NewConfirms(3)
	c.Resolve(0, nil)
	c.Resolve(1, refused)
	c.Resolve(1, nil) // late: ignored
	c.Resolve(0, refused)
	c.Resolve(2, nil)
	errs := c.Wait(context.Background(), 0)
	if len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], refused) || errs[2] != nil {
		t.Fatalf("got %v, want the refusal at index 1 only", errs)
	}
}

// TestConfirmsWaitEndsWithCtx: after ctx ends, Wait still takes the
// confirms that arrive within grace; with no grace left, what is
// unresolved is named unconfirmed, with the context's error.
func TestConfirmsWaitEndsWithCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := kit.NewConfirms(3)
	c.Resolve(0, nil)
	go func() {
		c.Resolve(1, nil)
		c.Resolve(2, nil)
	}()
	if errs := c.Wait(ctx, time.Hour); errs != nil {
		t.Fatalf("confirms within the grace: got %v, want nil", errs)
	}
	c = kit.NewConfirms(2)
	c.Resolve(0, nil)
	errs := c.Wait(ctx, 0)
	if len(errs) != 2 || errs[0] != nil {
		t.Fatalf("got %v, want 0 confirmed", errs)
	}
	if !errors.Is(errs[1], ports.ErrUnconfirmed) || !errors.Is(errs[1], context.Canceled) {
		t.Fatalf("unresolved message: got %v, want ErrUnconfirmed and context.Canceled", errs[1])
	}
}
