package operators_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// fake is a scripted adapter: tests push deliveries and read back which
// settlements the pipeline asked for.
type fake struct {
	mu      sync.Mutex
	cond    chan struct{} // closed and replaced on every change
	queue   []*ports.Delivery
	settled []settlement
	stopped bool
	errs    chan error
}

type settlement struct {
	id   string
	disp ports.Disposition
}

func newFake() *fake { return &fake{cond: make(chan struct{}), errs: make(chan error)} }

func (f *fake) changed() { close(f.cond); f.cond = make(chan struct{}) }

func (f *fake) Name() string                                 { return "fake" }
func (f *fake) Capabilities() ports.Capabilities             { return ports.Capabilities{PublisherConfirm: true} }
func (f *fake) Send(context.Context, ...ports.Message) error { return nil }
func (f *fake) Close(context.Context) error                  { return nil }
func (f *fake) Errors() <-chan error                         { return f.errs }

func (f *fake) Subscribe(context.Context, ports.SubscriptionSpec) (ports.Subscription, error) {
	return f, nil
}

func (f *fake) push(ds ...*ports.Delivery) {
	f.mu.Lock()
	f.queue = append(f.queue, ds...)
	f.changed()
	f.mu.Unlock()
}

func (f *fake) Receive(ctx context.Context, limit int) ([]*ports.Delivery, error) {
	for {
		f.mu.Lock()
		if f.stopped {
			f.mu.Unlock()
			return nil, ports.ErrClosed
		}
		if len(f.queue) > 0 {
			n := min(limit, len(f.queue))
			ds := append([]*ports.Delivery(nil), f.queue[:n]...)
			f.queue = f.queue[n:]
			f.mu.Unlock()
			return ds, nil
		}
		c := f.cond
		f.mu.Unlock()
		select {
		case <-c:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *fake) Settle(_ context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return ports.ErrClosed
	}
	for _, x := range ds {
		f.settled = append(f.settled, settlement{id: x.ID, disp: d})
	}
	f.changed()
	return nil
}

func (f *fake) Stop(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopped = true
		close(f.errs)
		f.changed()
	}
	return nil
}

func (f *fake) settlements() []settlement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]settlement(nil), f.settled...)
}

// byID returns the settlements keyed by delivery id.
func (f *fake) byID() map[string][]ports.Disposition {
	m := map[string][]ports.Disposition{}
	for _, s := range f.settlements() {
		m[s.id] = append(m[s.id], s.disp)
	}
	return m
}

// waitSettled waits until n settlements were made, failing after 10s.
func (f *fake) waitSettled(t tb, n int) []settlement {
	helper(t)
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		got, c := len(f.settled), f.cond
		f.mu.Unlock()
		if got >= n {
			return f.settlements()
		}
		select {
		case <-c:
		case <-deadline:
			t.Fatalf("timed out after 10s waiting for %d settlements; have %d: %v", n, got, f.settlements())
		}
	}
}

var seq atomic.Int64

// msg makes a delivery with a fresh id, the payload and the key.
func msg(payload, key string) *ports.Delivery {
	id := fmt.Sprintf("m%d", seq.Add(1))
	return &ports.Delivery{
		Message: ports.Message{Topic: "t", Key: key, Payload: []byte(payload), Headers: ports.NewHeaders(ports.HeaderID, id)},
		ID:      id,
	}
}

func msgs(n int) []*ports.Delivery {
	ds := make([]*ports.Delivery, n)
	for i := range ds {
		ds[i] = msg(fmt.Sprint(i), fmt.Sprintf("k%d", i%3))
	}
	return ds
}

var errTransient = errors.New("transient")

var spec = ports.SubscriptionSpec{Topic: "t", Group: "g", Retry: ports.RetryPolicy{MaxAttempts: 5, Backoff: time.Millisecond}}

// rig is a running pipeline over a fake adapter that records every
// terminal event per delivery and every reported error.
type rig struct {
	f *fake
	p *flow.Pipeline

	mu       sync.Mutex
	cond     chan struct{}                    // closed and replaced on every terminal event
	terminal map[*ports.Delivery][]flow.Event // keyed by delivery: duplicates share an id
	received int
	seen     map[*ports.Delivery]bool // deliveries with a Received event
	errs     []error
	stopOnce sync.Once
}

// newRig builds a pipeline with build, starts it and stops it (draining)
// when the test ends, then checks the settlement invariant.
func newRig(t tb, sp ports.SubscriptionSpec, build func(p *flow.Pipeline)) *rig {
	helper(t)
	r := &rig{f: newFake(), terminal: map[*ports.Delivery][]flow.Event{}, seen: map[*ports.Delivery]bool{}, cond: make(chan struct{})}
	r.p = flow.New(r.f, sp,
		flow.WithObserver(r.observe),
		flow.WithErrorHandler(func(err error) { r.mu.Lock(); r.errs = append(r.errs, err); r.mu.Unlock() }))
	build(r.p)
	if err := r.p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { r.stop(t, true) })
	return r
}

func (r *rig) observe(e flow.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Received {
		r.received++
		r.seen[e.Delivery] = true
	} else {
		r.terminal[e.Delivery] = append(r.terminal[e.Delivery], e)
	}
	close(r.cond)
	r.cond = make(chan struct{})
}

// stop stops the pipeline: with drain, waiting up to 10s for in-flight
// work; without, cancelling it at once.
func (r *rig) stop(t tb, drain bool) {
	helper(t)
	r.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if !drain {
			cancel()
		}
		defer cancel()
		// Without a drain, in-flight work is abandoned on purpose and Stop
		// says so with an *AbandonedError; with one, nothing may be.
		var abandoned *flow.AbandonedError
		if err := r.p.Stop(ctx); err != nil && (drain || !errors.As(err, &abandoned)) {
			t.Errorf("Stop: %v", err)
		}
		r.checkInvariant(t)
	})
}

// checkInvariant asserts that every received delivery ended exactly once
// (settled, or deliberately not settled) and that no operator completed
// anything twice.
func (r *rig) checkInvariant(t tb) {
	helper(t)
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range r.seen {
		if len(r.terminal[d]) == 0 {
			t.Errorf("delivery %s was received and never reached an end (an operator lost it)", d.ID)
		}
	}
	for d, es := range r.terminal {
		if len(es) != 1 {
			t.Errorf("delivery %s ended %d times: %+v", d.ID, len(es), es)
		}
		if !r.seen[d] && es[0].Outcome.Kind != flow.Cancelled {
			t.Errorf("delivery %s ended %v without being received", d.ID, es[0].Outcome.Kind)
		}
	}
	for _, err := range r.errs {
		if errors.Is(err, ports.ErrConflict) {
			t.Errorf("conflicting completion reported: %v", err)
		}
	}
}

// outcomes returns, per delivery id, its terminal outcome kind and action.
func (r *rig) outcomes() map[string]flow.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]flow.Event{}
	for d, es := range r.terminal {
		m[d.ID] = es[0]
	}
	return m
}

// waitReceived waits until n deliveries were received, failing after 10s.
func (r *rig) waitReceived(t tb, n int) {
	helper(t)
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got, c := r.received, r.cond
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-c:
		case <-deadline:
			t.Fatalf("timed out after 10s waiting for %d deliveries to be received; %d were", n, got)
		}
	}
}

// waitEnded waits until n deliveries reached an end, failing after 10s.
func (r *rig) waitEnded(t tb, n int) map[string]flow.Event {
	helper(t)
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		got, c := len(r.terminal), r.cond
		r.mu.Unlock()
		if got >= n {
			return r.outcomes()
		}
		select {
		case <-c:
		case <-deadline:
			t.Fatalf("timed out after 10s waiting for %d deliveries to end; %d did", n, got)
		}
	}
}

func actions(ds []ports.Disposition) []string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Action.String())
	}
	sort.Strings(s)
	return s
}

// recv waits for a value from ch, failing after 10s.
func recv[T any](t tb, ch <-chan T, what string) T {
	helper(t)
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out after 10s waiting for %s", what)
	}
	var zero T
	return zero
}

// tap passes items on and then signals seen, so a test knows an item has
// reached the next stage's input.
func tap[T any](s flow.Stream[T], seen chan<- struct{}) flow.Stream[T] {
	return flow.Via(s, func(it flow.Item[T], emit flow.Emit[T]) {
		emit(it)
		seen <- struct{}{}
	})
}

// waitN receives n signals from ch, failing after 10s.
func waitN(t tb, ch <-chan struct{}, n int, what string) {
	helper(t)
	for range n {
		recv(t, ch, what)
	}
}

// tb is what the rig needs of a test: testing.TB and rapid.T both have it.
type tb interface {
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

func helper(t tb) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
}
