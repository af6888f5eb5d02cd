package kit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

type lazyConn struct{ lost bool }

// TestLazyOpensOnFirstUseAndAfterALoss: Get opens once and reuses the
// connection while it is alive, opens again after a loss or a failed
// open, and fails with ports.ErrClosed after Close, which closes it.
func TestLazyOpensOnFirstUseAndAfterALoss(t *testing.T) {
	ctx := context.Background()
	opens, refuse := 0, false
	refused := errors.New("refused")
	l := kit.NewLazy(func(context.Context) (*lazyConn, error) {
		if refuse {
			return nil, refused
		}
		opens++
		return &lazyConn{}, nil
	}, func(c *lazyConn) bool { return !c.lost })
	a, err := l.Get(ctx)
	if b, _ := l.Get(ctx); err != nil || a != b || opens != 1 {
		t.Fatalf("two Gets: %p %p %v after %d opens, want one connection", a, b, err, opens)
	}
	a.lost, refuse = true, true
	if _, err := l.Get(ctx); !errors.Is(err, refused) {
		t.Fatalf("Get after a loss while the broker refuses: %v", err)
	}
	refuse = false
	b, err := l.Get(ctx)
	if err != nil || b == a || opens != 2 {
		t.Fatalf("Get after the refusal: %v, %d opens", err, opens)
	}
	var closed *lazyConn
	cancelled, cancel := context.WithCancel(ctx)
	cancel() // a free lock is taken whatever ctx says: Close closes
	if err := l.Close(cancelled, func(c *lazyConn) error { closed = c; return nil }); err != nil || closed != b {
		t.Fatalf("Close: %v, closed %p, want %p", err, closed, b)
	}
	if _, err := l.Get(ctx); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}
