package flow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// fakeAdapter is a scripted adapter: tests push deliveries and read back
// exactly which settlements the pipeline asked for.
type fakeAdapter struct {
	mu         sync.Mutex
	cond       chan struct{} // closed and replaced on every change
	queue      []*ports.Delivery
	settled    []settlement
	stopped    bool
	subscribed bool
	settleErr  error
	recvErr    error
	maxOut     int // most deliveries handed out and unsettled at once
	out        int
	errs       chan error
}

type settlement struct {
	id   string
	disp ports.Disposition
}

func newFake() *fakeAdapter {
	return &fakeAdapter{cond: make(chan struct{}), errs: make(chan error, 8)}
}

func (f *fakeAdapter) changed() { close(f.cond); f.cond = make(chan struct{}) }

func (f *fakeAdapter) Name() string { return "fake" }
func (f *fakeAdapter) Capabilities() ports.Capabilities {
	return ports.Capabilities{PublisherConfirm: true}
}
func (f *fakeAdapter) Send(context.Context, ...ports.Message) error { return nil }
func (f *fakeAdapter) Close(context.Context) error                  { return nil }

func (f *fakeAdapter) Subscribe(_ context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subscribed = true
	return f, nil
}

// push queues deliveries with the given ids, payloads and redelivery counts.
func (f *fakeAdapter) push(ds ...*ports.Delivery) {
	f.mu.Lock()
	f.queue = append(f.queue, ds...)
	f.changed()
	f.mu.Unlock()
}

func (f *fakeAdapter) Receive(ctx context.Context, limit int) ([]*ports.Delivery, error) {
	for {
		f.mu.Lock()
		if f.stopped {
			f.mu.Unlock()
			return nil, ports.ErrClosed
		}
		if f.recvErr != nil {
			err := f.recvErr
			f.mu.Unlock()
			return nil, err
		}
		if len(f.queue) > 0 {
			n := min(limit, len(f.queue))
			ds := append([]*ports.Delivery(nil), f.queue[:n]...)
			f.queue = f.queue[n:]
			f.out += n
			f.maxOut = max(f.maxOut, f.out)
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

func (f *fakeAdapter) Settle(_ context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return ports.ErrClosed
	}
	if f.settleErr != nil {
		return f.settleErr
	}
	for _, x := range ds {
		f.settled = append(f.settled, settlement{id: x.ID, disp: d})
		f.out--
	}
	f.changed()
	return nil
}

func (f *fakeAdapter) Stop(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopped {
		f.stopped = true
		close(f.errs)
		f.changed()
	}
	return nil
}

func (f *fakeAdapter) Errors() <-chan error { return f.errs }

// settlements returns a copy of what was settled so far.
func (f *fakeAdapter) settlements() []settlement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]settlement(nil), f.settled...)
}

// waitSettled waits until n settlements were made, failing after 5s.
func (f *fakeAdapter) waitSettled(t *testing.T, n int) []settlement {
	t.Helper()
	deadline := time.After(5 * time.Second)
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
			t.Fatalf("timed out after 5s waiting for %d settlements; have %d: %v", n, got, f.settlements())
		}
	}
}

// waitStats waits until p's counters satisfy ok, failing after 5s with
// want. The engine counts a settlement after the adapter's Settle
// returned, so a test that saw the settlement polls the counters.
func waitStats(t *testing.T, p *flow.Pipeline, want string, ok func(flow.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for st := p.Stats(); !ok(st); st = p.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v after 5s: want %s", st, want)
		}
		time.Sleep(time.Millisecond) // polling counters, bounded above
	}
}

var seq int

func delivery(payload string, redeliveries int) *ports.Delivery {
	seq++
	id := fmt.Sprintf("m%d", seq)
	return &ports.Delivery{
		Message:         ports.Message{Topic: "t", Payload: []byte(payload), Headers: ports.NewHeaders(ports.HeaderID, id)},
		ID:              id,
		RedeliveryCount: redeliveries,
	}
}

var errTransient = errors.New("transient")
