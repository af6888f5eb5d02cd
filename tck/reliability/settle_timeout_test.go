package reliability_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// stuckAdapter is a mem adapter whose Settle blocks until its context ends,
// as an acknowledgement into a black-holed connection would.
type stuckAdapter struct{ *mem.Adapter }

// stuckSub's Settle returns only when its context ends or the
// subscription stops (then ErrClosed, as adapters do).
type stuckSub struct {
	ports.Subscription
	stopped chan struct{}
	once    *sync.Once
}

func (a stuckAdapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	s, err := a.Adapter.Subscribe(ctx, spec)
	if err != nil {
		return nil, err
	}
	return stuckSub{Subscription: s, stopped: make(chan struct{}), once: &sync.Once{}}, nil
}

func (s stuckSub) Settle(ctx context.Context, _ []*ports.Delivery, _ ports.Disposition) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopped:
		return ports.ErrClosed
	}
}

func (s stuckSub) Stop(ctx context.Context) error {
	s.once.Do(func() { close(s.stopped) })
	return s.Subscription.Stop(ctx)
}

// TestSettleTimeoutBoundsSettle: flow.WithSettleTimeout documents that it
// bounds each call to the adapter's Settle. A Settle stuck on a dead link
// must therefore fail after it, leaving the delivery unsettled and its
// in-flight slot free, instead of holding the slot until Stop.
func TestSettleTimeoutBoundsSettle(t *testing.T) {
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close(context.Background()) }()
	ma, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	a := stuckAdapter{ma}
	failed := make(chan error, 1)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "stuck", Group: "g"}, flow.WithSettleTimeout(100*time.Millisecond),
		flow.WithErrorHandler(func(err error) {
			var se *flow.SettleError
			if errors.As(err, &se) {
				select {
				case failed <- err:
				default:
				}
			}
		}))
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithCancel(ctx)
		cancel()
		_ = p.Stop(sctx)
	}()
	if err := a.Send(ctx, ports.Message{Topic: "stuck", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("settle failed with %v, want the settle timeout", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a Settle stuck for 3s was not failed by a 100ms WithSettleTimeout: its in-flight slot and handler " +
			"goroutine stay held until Stop (regression of fc35cb0)")
	}
}
