package tck

import (
	"context"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// handedOut wraps an adapter and counts, over all its subscriptions, the
// deliveries its Receive handed out that no Settle has taken back yet:
// what the adapter let into the process, whatever the handlers do. It
// also counts Receive calls that returned more than they were asked for.
type handedOut struct {
	ports.Adapter

	mu       sync.Mutex
	out      int
	peak     int
	overAsk  int // Receive calls that returned more than max
	received int
}

// Unwrap lets ports.ApplySpecDefaults see the wrapped adapter.
func (h *handedOut) Unwrap() ports.Adapter { return h.Adapter }

func (h *handedOut) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	s, err := h.Adapter.Subscribe(ctx, spec)
	if err != nil {
		return nil, err
	}
	c := &countedSub{Subscription: s, h: h}
	if f, ok := s.(ports.Flusher); ok {
		return countedFlusher{c, f}, nil
	}
	return c, nil
}

func (h *handedOut) add(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.out += n
	h.peak = max(h.peak, h.out)
}

// stats returns the peak handed out at once, the deliveries received and
// the Receive calls that returned more than asked.
func (h *handedOut) stats() (peak, received, overAsk int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak, h.received, h.overAsk
}

type countedSub struct {
	ports.Subscription
	h *handedOut
}

func (s *countedSub) Receive(ctx context.Context, limit int) ([]*ports.Delivery, error) {
	ds, err := s.Subscription.Receive(ctx, limit)
	s.h.mu.Lock()
	if len(ds) > limit {
		s.h.overAsk++
	}
	s.h.received += len(ds)
	s.h.mu.Unlock()
	s.h.add(len(ds))
	return ds, err
}

// Settle takes the deliveries back whatever its result: the core no
// longer holds them (a failed settlement leaves them to the broker).
func (s *countedSub) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	err := s.Subscription.Settle(ctx, ds, d)
	s.h.add(-len(ds))
	return err
}

type countedFlusher struct {
	*countedSub
	f ports.Flusher
}

func (c countedFlusher) Flush(ctx context.Context) error { return c.f.Flush(ctx) }
