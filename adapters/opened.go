package adapters

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// claim makes the caller the Mux's one active adapter; release gives the
// slot back (once). Non-exclusive adapters claim nothing.
func (m *Mux) claim(shown string, notExclusive bool) (release func(), err error) {
	if notExclusive {
		return func() {}, nil
	}
	a := &m.active
	a.Lock()
	defer a.Unlock()
	if a.open {
		return nil, fmt.Errorf("%w (%s); one adapter is active at a time: close it first, or pass adapters.NotExclusive() (or open with a Mux of its own) in tests and bridging tools", ErrAlreadyOpen, a.url)
	}
	a.open, a.url = true, shown
	var once sync.Once
	return func() {
		once.Do(func() {
			a.Lock()
			a.open, a.url = false, ""
			a.Unlock()
		})
	}, nil
}

// opened is an adapter returned by Open: the adapter itself, plus the
// process slot it holds and the subscription defaults.
type opened struct {
	ports.Adapter
	url     string
	cfg     *Config
	secrets []string // scrubbed from the errors of Send and Subscribe
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
// filled in (see SpecDefaults). For an adapter that did not come from Open
// it returns s as it is. flow.New applies the same defaults by itself, so
// calling Spec is only needed to see the resulting spec.
func Spec(a ports.Adapter, s ports.SubscriptionSpec) ports.SubscriptionSpec {
	if o, ok := a.(*opened); ok {
		return o.SpecDefaults(s)
	}
	return s
}

// SpecDefaults implements ports.SpecDefaulter: the URL's inflight,
// max_attempts, backoff and max_backoff (or WithInFlight and WithRetry)
// fill the fields s leaves zero, one field at a time; a field set in code
// wins. It applies to every subscription made on the adapter, through
// flow.New or Subscribe. Fields still zero take the ports defaults.
func (o *opened) SpecDefaults(s ports.SubscriptionSpec) ports.SubscriptionSpec {
	c := o.cfg
	if s.InFlight == 0 && c.inFlightSet {
		s.InFlight = max(c.InFlight, s.Batch.Size)
	}
	r, d := &s.Retry, c.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = d.MaxAttempts
	}
	if r.Backoff == 0 && !r.NoBackoff {
		r.Backoff = d.Backoff
		r.NoBackoff = d.NoBackoff
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = d.MaxBackoff
		if r.Backoff > 0 && r.MaxBackoff > 0 && r.MaxBackoff < r.Backoff {
			r.MaxBackoff = r.Backoff // the code's Backoff wins over the URL's cap
		}
	}
	if r.Multiplier == 0 {
		r.Multiplier = d.Multiplier
	}
	if r.Jitter == 0 && !r.NoJitter {
		r.Jitter = d.Jitter
		r.NoJitter = d.NoJitter
	}
	return s
}

// Subscribe subscribes with the adapter's subscription defaults applied
// (SpecDefaults), so they hold for callers that bypass flow.New too. Its
// error is scrubbed of the URL's secrets, as Open's is.
func (o *opened) Subscribe(ctx context.Context, s ports.SubscriptionSpec) (ports.Subscription, error) {
	sub, err := o.Adapter.Subscribe(ctx, o.SpecDefaults(s))
	if err != nil {
		return nil, o.scrub(err)
	}
	return sub, nil
}

// Send sends through the adapter; its error is scrubbed of the URL's
// secrets (errors.Is, errors.As and ports.SendErrors still see the
// adapter's error).
func (o *opened) Send(ctx context.Context, msgs ...ports.Message) error {
	if err := o.Adapter.Send(ctx, msgs...); err != nil {
		return o.scrub(err)
	}
	return nil
}

// scrub hides the secrets of the adapter's URL in err's text.
func (o *opened) scrub(err error) error {
	if o.secrets == nil {
		return err
	}
	return scrub(err, o.secrets)
}
