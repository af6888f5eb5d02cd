package adapters

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// active is the process's one exclusive adapter, by its shown URL.
var active struct {
	sync.Mutex
	url  string
	open bool
}

// claim makes the caller the process's one adapter; release gives the
// slot back (once). Non-exclusive adapters claim nothing.
func claim(shown string, notExclusive bool) (release func(), err error) {
	if notExclusive {
		return func() {}, nil
	}
	active.Lock()
	defer active.Unlock()
	if active.open {
		return nil, fmt.Errorf("%w (%s); exactly one adapter is active per process: close it first, or pass adapters.NotExclusive() in tests and bridging tools", ErrAlreadyOpen, active.url)
	}
	active.open, active.url = true, shown
	var once sync.Once
	return func() {
		once.Do(func() {
			active.Lock()
			active.open, active.url = false, ""
			active.Unlock()
		})
	}, nil
}

// opened is an adapter returned by Open: the adapter itself, plus the
// process slot it holds and the subscription defaults.
type opened struct {
	ports.Adapter
	url     string
	cfg     *Config
	release func()
}

// Close closes the adapter and frees the process's adapter slot, also
// when closing failed (the adapter is unusable either way).
func (o *opened) Close(ctx context.Context) error {
	defer o.release()
	return o.Adapter.Close(ctx)
}

// Unwrap returns the adapter's own type (for example *mem.Adapter).
func (o *opened) Unwrap() ports.Adapter { return o.Adapter }

// Unwrap returns the adapter Open wraps (its concrete type, such as
// *mem.Adapter), or a itself when a did not come from Open. It follows
// every wrapper with an Unwrap() ports.Adapter method.
func Unwrap(a ports.Adapter) ports.Adapter {
	for {
		w, ok := a.(interface{ Unwrap() ports.Adapter })
		if !ok {
			return a
		}
		a = w.Unwrap()
	}
}

// URL returns the URL a was opened with, without credentials, or "" when
// a did not come from Open.
func URL(a ports.Adapter) string {
	if o, ok := a.(*opened); ok {
		return o.url
	}
	return ""
}

// Spec returns s with the subscription defaults of a's URL and options
// filled into its zero fields: InFlight (inflight, WithInFlight) and Retry
// (max_attempts, backoff, max_backoff, WithRetry) when s.Retry is the zero
// value. For an adapter that did not come from Open it returns s as it is.
// Fields left zero after that take the ports defaults in flow.New.
func Spec(a ports.Adapter, s ports.SubscriptionSpec) ports.SubscriptionSpec {
	o, ok := a.(*opened)
	if !ok {
		return s
	}
	if s.InFlight == 0 {
		s.InFlight = o.cfg.InFlight
	}
	if s.Retry == (ports.RetryPolicy{}) {
		s.Retry = o.cfg.Retry
	}
	return s
}
