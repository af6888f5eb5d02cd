package flow_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type order struct {
	ID    string `json:"id"`
	Total int    `json:"total"`
}

var spec = ports.SubscriptionSpec{Topic: "t", Group: "g", Retry: ports.RetryPolicy{MaxAttempts: 3, Backoff: time.Millisecond}}

// start runs a pipeline built by build over a fresh fake adapter and stops
// it when the test ends.
func start(t *testing.T, sp ports.SubscriptionSpec, build func(p *flow.Pipeline), opts ...flow.Option) (*fakeAdapter, *flow.Pipeline) {
	t.Helper()
	f := newFake()
	p := flow.New(f, sp, opts...)
	build(p)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return f, p
}

func sinkOrders(fn func(context.Context, order) error) func(*flow.Pipeline) {
	return func(p *flow.Pipeline) { flow.Sink(flow.Decode[order](p.Source()), fn) }
}

func TestSuccessAcks(t *testing.T) {
	f, p := start(t, spec, sinkOrders(func(context.Context, order) error { return nil }))
	f.push(delivery(`{"id":"a","total":3}`, 0))
	s := f.waitSettled(t, 1)
	if s[0].disp.Action != ports.Ack {
		t.Fatalf("settled %v, want ACK", s[0].disp.Action)
	}
	waitStats(t, p, "1 received, 1 acked", func(st flow.Stats) bool { return st.Acked == 1 && st.Received == 1 })
}

func TestMalformedPayloadIsDeadLetteredWithReason(t *testing.T) {
	called := atomic.Bool{}
	f, _ := start(t, spec, sinkOrders(func(context.Context, order) error { called.Store(true); return nil }))
	f.push(delivery(`{"id":`, 0))
	s := f.waitSettled(t, 1)
	d := s[0].disp
	if d.Action != ports.DeadLetter {
		t.Fatalf("settled %v, want DEAD_LETTER", d.Action)
	}
	var de *ports.DecodeError
	if !errors.As(d.Reason, &de) || !strings.Contains(d.ReasonText(), "flow_test.order") {
		t.Fatalf("reason %v, want a DecodeError naming the type", d.Reason)
	}
	if d.Attempts != 1 {
		t.Fatalf("attempts %d, want 1 (poison burns no retries)", d.Attempts)
	}
	if called.Load() {
		t.Fatal("handler called for an undecodable payload")
	}
}

func TestPoisonErrorDeadLetters(t *testing.T) {
	f, _ := start(t, spec, sinkOrders(func(context.Context, order) error {
		return ports.Poisonf("order total %d is negative", -1)
	}))
	f.push(delivery(`{"id":"a"}`, 0))
	if d := f.waitSettled(t, 1)[0].disp; d.Action != ports.DeadLetter || !ports.IsPoison(d.Reason) {
		t.Fatalf("settled %+v, want DEAD_LETTER with a poison reason", d)
	}
}

func TestTransientErrorRequeuesWithBackoff(t *testing.T) {
	sp := spec
	sp.Retry = ports.RetryPolicy{MaxAttempts: 5, Backoff: 40 * time.Millisecond, Jitter: 0.01}
	f, _ := start(t, sp, sinkOrders(func(context.Context, order) error { return errTransient }))
	f.push(delivery(`{}`, 0), delivery(`{}`, 2))
	s := f.waitSettled(t, 2)
	for _, x := range s {
		if x.disp.Action != ports.Requeue || !errors.Is(x.disp.Reason, errTransient) {
			t.Fatalf("settled %+v, want REQUEUE with the handler's error", x.disp)
		}
		// attempt 1 → ~40ms, attempt 3 → ~160ms (±1%).
		want := 40 * time.Millisecond
		if x.disp.Attempts == 3 {
			want = 160 * time.Millisecond
		}
		if lo, hi := want*98/100, want*102/100; x.disp.Delay < lo || x.disp.Delay > hi {
			t.Fatalf("attempt %d delay %v, want %v ±2%%", x.disp.Attempts, x.disp.Delay, want)
		}
	}
}

func TestRetriesExhaustedDeadLetters(t *testing.T) {
	f, _ := start(t, spec, sinkOrders(func(context.Context, order) error { return errTransient }))
	f.push(delivery(`{}`, 2)) // third delivery of a MaxAttempts=3 policy
	d := f.waitSettled(t, 1)[0].disp
	var re *flow.RetriesExhaustedError
	if d.Action != ports.DeadLetter || !errors.As(d.Reason, &re) || re.Attempts != 3 || !errors.Is(d.Reason, errTransient) {
		t.Fatalf("settled %+v, want DEAD_LETTER after 3 attempts wrapping the last error", d)
	}
}

func TestDisabledDeadLetterRequeuesPoisonAndReports(t *testing.T) {
	sp := spec
	sp.DisableDeadLetter = true
	sp.Retry.MaxBackoff = time.Second
	var reported atomic.Int32
	f, _ := start(t, sp, sinkOrders(func(context.Context, order) error { return nil }),
		flow.WithErrorHandler(func(error) { reported.Add(1) }))
	f.push(delivery(`not json`, 0))
	d := f.waitSettled(t, 1)[0].disp
	if d.Action != ports.Requeue || d.Delay != time.Second {
		t.Fatalf("settled %+v, want REQUEUE after MaxBackoff (never a drop)", d)
	}
	if reported.Load() == 0 {
		t.Fatal("poison with dead letter disabled was not reported")
	}
}

func TestPanicInHandlerBecomesError(t *testing.T) {
	f, _ := start(t, spec, sinkOrders(func(context.Context, order) error { panic("boom") }))
	f.push(delivery(`{}`, 0))
	d := f.waitSettled(t, 1)[0].disp
	var pe *ports.PanicError
	if d.Action != ports.Requeue || !errors.As(d.Reason, &pe) || pe.Value != "boom" {
		t.Fatalf("settled %+v, want REQUEUE with a PanicError", d)
	}
}

func TestPanicInMapBecomesError(t *testing.T) {
	f, _ := start(t, spec, func(p *flow.Pipeline) {
		m := flow.Map(flow.Decode[order](p.Source()), func(context.Context, order) (int, error) { panic(errTransient) })
		flow.Sink(m, func(context.Context, int) error { return nil })
	})
	f.push(delivery(`{}`, 0))
	if d := f.waitSettled(t, 1)[0].disp; d.Action != ports.Requeue || !errors.Is(d.Reason, errTransient) {
		t.Fatalf("settled %+v, want REQUEUE wrapping the panic value", d)
	}
}

func TestFilterDropAcks(t *testing.T) {
	var handled atomic.Int32
	f, _ := start(t, spec, func(p *flow.Pipeline) {
		kept := flow.Filter(flow.Decode[order](p.Source()), func(_ context.Context, o order) (bool, error) { return o.Total > 0, nil })
		flow.Sink(kept, func(context.Context, order) error { handled.Add(1); return nil })
	})
	f.push(delivery(`{"total":0}`, 0), delivery(`{"total":5}`, 0))
	for _, s := range f.waitSettled(t, 2) {
		if s.disp.Action != ports.Ack {
			t.Fatalf("settled %v, want ACK for both kept and dropped", s.disp.Action)
		}
	}
	if handled.Load() != 1 {
		t.Fatalf("handler saw %d items, want 1", handled.Load())
	}
}

func TestFlatMapSettlesInputAfterAllOutputs(t *testing.T) {
	release := make(chan struct{})
	var seen sync.WaitGroup
	seen.Add(3)
	f, _ := start(t, spec, func(p *flow.Pipeline) {
		parts := flow.FlatMap(p.Source(), func(context.Context, *ports.Delivery) ([]int, error) { return []int{1, 2, 3}, nil })
		flow.Sink(parts, func(_ context.Context, n int) error {
			seen.Done()
			<-release
			if n == 2 {
				return errTransient
			}
			return nil
		}, flow.Workers(3))
	})
	f.push(delivery(`{}`, 0))
	seen.Wait() // all three outputs are being handled, none completed
	if s := f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v before the outputs completed", s)
	}
	close(release)
	if d := f.waitSettled(t, 1)[0].disp; d.Action != ports.Requeue {
		t.Fatalf("settled %v, want REQUEUE (one output failed)", d.Action)
	}
}

func TestSettleFailureLeavesUnsettledAndReports(t *testing.T) {
	errs := make(chan error, 4)
	f := newFake()
	f.settleErr = errors.New("channel closed")
	p := flow.New(f, spec, flow.WithErrorHandler(func(err error) { errs <- err }))
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	f.push(delivery(`{}`, 0))
	select {
	case err := <-errs:
		var se *flow.SettleError
		if !errors.As(err, &se) || se.Action != ports.Ack {
			t.Fatalf("reported %v, want a SettleError for the ACK", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a failed settlement was not reported within 5s")
	}
	waitStats(t, p, "0 acked and 1 settle error", func(st flow.Stats) bool { return st.Acked == 0 && st.SettleErrors == 1 })
}

func TestRequestIDRestoredInHandlerContext(t *testing.T) {
	got := make(chan string, 1)
	f, _ := start(t, spec, sinkOrders(func(ctx context.Context, _ order) error {
		got <- flow.RequestID(ctx) + "|" + flow.DeliveryFrom(ctx).ID
		return nil
	}))
	d := delivery(`{}`, 0)
	d.Headers.Set(ports.HeaderRequestID, "req-42")
	f.push(d)
	select {
	case s := <-got:
		if s != "req-42|"+d.ID {
			t.Fatalf("handler context had %q, want request id req-42 and the delivery", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not called within 5s")
	}
}

func TestKeyFilterAcksForeignKeysWithoutHandling(t *testing.T) {
	sp := spec
	sp.KeyFilter = "dev-*"
	var handled atomic.Int32
	f, p := start(t, sp, sinkOrders(func(context.Context, order) error { handled.Add(1); return nil }))
	a, b := delivery(`{}`, 0), delivery(`{}`, 0)
	a.Key, b.Key = "dev-1", "other"
	f.push(a, b)
	f.waitSettled(t, 2)
	if handled.Load() != 1 || p.Stats().Filtered != 1 {
		t.Fatalf("handled %d, filtered %d; want 1 and 1", handled.Load(), p.Stats().Filtered)
	}
}

func TestReceiveErrorIsFatal(t *testing.T) {
	f := newFake()
	f.recvErr = errors.New("connection refused")
	p := flow.New(f, spec)
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Run(ctx); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Run returned %v, want the receive error", err)
	}
}

func TestBuildErrors(t *testing.T) {
	f := newFake()
	p := flow.New(f, spec)
	_ = flow.Decode[order](p.Source()) // never consumed
	if err := p.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "no consumer") {
		t.Fatalf("Start with a dangling stream: %v, want a 'no consumer' error", err)
	}
	p2 := flow.New(f, ports.SubscriptionSpec{Topic: "t"}) // LOAD_BALANCE without a group
	flow.Sink(p2.Source(), func(context.Context, *ports.Delivery) error { return nil })
	if err := p2.Start(context.Background()); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Start with an invalid spec: %v, want ErrInvalid", err)
	}
}

func TestMalformedEnvelopeIsDeadLetteredUnhandled(t *testing.T) {
	var handled atomic.Int32
	f, _ := start(t, spec, sinkOrders(func(context.Context, order) error { handled.Add(1); return nil }))
	d := delivery(`{}`, 0)
	d.Err = &ports.HeaderError{Header: ports.HeaderRedeliveryCount, Value: "x"}
	f.push(d)
	s := f.waitSettled(t, 1)[0].disp
	if s.Action != ports.DeadLetter || !strings.Contains(s.ReasonText(), "malformed header") {
		t.Fatalf("settled %+v, want DEAD_LETTER naming the malformed header", s)
	}
	if handled.Load() != 0 {
		t.Fatal("a delivery with a malformed envelope reached the handler")
	}
}

// blockingSettle never returns from Settle until its context is done.
type blockingSettle struct{ *fakeAdapter }

func (b blockingSettle) Subscribe(ctx context.Context, s ports.SubscriptionSpec) (ports.Subscription, error) {
	return b, nil
}

func (b blockingSettle) Settle(ctx context.Context, _ []*ports.Delivery, _ ports.Disposition) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestSettleTimeoutBoundsAStuckSettle(t *testing.T) {
	f := newFake()
	errs := make(chan error, 4)
	p := flow.New(blockingSettle{f}, spec, flow.WithSettleTimeout(20*time.Millisecond),
		flow.WithErrorHandler(func(err error) { errs <- err }))
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	f.push(delivery(`{}`, 0))
	select {
	case err := <-errs:
		var se *flow.SettleError
		if !errors.As(err, &se) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reported %v, want a SettleError wrapping DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stuck Settle was not bounded by WithSettleTimeout within 5s")
	}
	waitStats(t, p, "the slot released and the failure counted", func(st flow.Stats) bool { return st.InFlight == 0 && st.SettleErrors == 1 })
}

// Every WithObserver given sees every event, in the order given.
func TestObserversAreAllCalled(t *testing.T) {
	seen := make(chan string, 4)
	observe := func(name string) flow.Option {
		return flow.WithObserver(func(e flow.Event) {
			if e.Action == ports.Ack {
				seen <- name
			}
		})
	}
	f, _ := start(t, spec, sinkOrders(func(context.Context, order) error { return nil }), observe("first"), flow.WithObserver(nil), observe("second"))
	f.push(delivery(`{"id":"a","total":3}`, 0))
	for _, want := range []string{"first", "second"} {
		select {
		case got := <-seen:
			if got != want {
				t.Fatalf("observer %q saw the ack before %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("observer %q did not see the ack within 5s", want)
		}
	}
}
