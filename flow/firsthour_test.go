package flow_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Stop(context.Background()) must drain for the drain timeout, cancel and
// return; it used to wait for ctx alone and hung forever.
func TestStopWithBackgroundContextCancelsAfterDrainTimeout(t *testing.T) {
	f := newFake()
	entered := make(chan struct{})
	p := flow.New(f, spec, flow.WithDrainTimeout(50*time.Millisecond))
	flow.Sink(p.Source(), func(ctx context.Context, _ *ports.Delivery) error {
		close(entered)
		<-ctx.Done()
		return ctx.Err()
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.push(delivery(`{}`, 0))
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		var ae *flow.AbandonedError
		if !errors.As(err, &ae) || ae.InFlight != 1 || ae.Cancelled != 1 {
			t.Fatalf("Stop = %v, want an *AbandonedError: 1 in flight, 1 cancelled", err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop = %v, want errors.Is context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop(context.Background()) did not return within 10s with a 50ms drain timeout")
	}
	if s := f.settlements(); len(s) != 0 {
		t.Fatalf("stop settled %v", s)
	}
}

func TestValidateSeesTheCallersValuesBeforeDefaults(t *testing.T) {
	for name, mut := range map[string]func(*ports.SubscriptionSpec){
		"negative inflight":          func(s *ports.SubscriptionSpec) { s.InFlight = -1 },
		"jitter above 1":             func(s *ports.SubscriptionSpec) { s.Retry.Jitter = 3 },
		"negative backoff":           func(s *ports.SubscriptionSpec) { s.Retry.Backoff = -time.Second },
		"multiplier below 1":         func(s *ports.SubscriptionSpec) { s.Retry.Multiplier = 0.5 },
		"batch larger than inflight": func(s *ports.SubscriptionSpec) { s.InFlight = 4; s.Batch.Size = 10 },
		"jitter with NoJitter":       func(s *ports.SubscriptionSpec) { s.Retry.Jitter = 0.1; s.Retry.NoJitter = true },
	} {
		t.Run(name, func(t *testing.T) {
			sp := spec
			mut(&sp)
			p := flow.New(newFake(), sp)
			flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
			err := p.Start(context.Background())
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("Start = %v, want ErrInvalid", err)
			}
			_ = p.Stop(context.Background())
		})
	}
}

func TestNoJitterAndConstantBackoff(t *testing.T) {
	r := ports.RetryPolicy{Backoff: 10 * time.Millisecond, Multiplier: 1, NoJitter: true}.WithDefaults()
	for attempt := 1; attempt <= 5; attempt++ {
		if d := r.Delay(attempt); d != 10*time.Millisecond {
			t.Fatalf("Delay(%d) = %v, want exactly 10ms (constant, no jitter)", attempt, d)
		}
	}
	if def := (ports.RetryPolicy{}).WithDefaults(); def.Jitter != ports.DefaultJitter || def.Multiplier != ports.DefaultMultiplier {
		t.Fatalf("zero policy defaults = %+v, want jitter %v multiplier %v", def, ports.DefaultJitter, ports.DefaultMultiplier)
	}
	sp := spec
	sp.Batch.Size = 100 // InFlight left zero: raised to the batch size
	if got := flow.New(newFake(), sp).Spec().InFlight; got != 100 {
		t.Fatalf("InFlight = %d, want 100", got)
	}
}

func TestPanicIsLoggedOnceWithStackAndReported(t *testing.T) {
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	reported := make(chan error, 4)
	f, _ := start(t, spec, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { panic("kaboom") })
	}, flow.WithLogger(logger), flow.WithErrorHandler(func(err error) { reported <- err }))
	f.push(delivery(`{}`, 0))
	f.waitSettled(t, 1)
	select {
	case err := <-reported:
		var pe *ports.PanicError
		if !errors.As(err, &pe) || len(pe.Stack) == 0 {
			t.Fatalf("reported %v, want a *ports.PanicError with a stack", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the error handler was not called for the panic within 5s")
	}
	out := buf.String()
	if n := strings.Count(out, "handler panicked"); n != 1 {
		t.Fatalf("panic logged %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "kaboom") || !strings.Contains(out, "firsthour_test.go") {
		t.Fatalf("log lacks the panic value or the stack:\n%s", out)
	}
}

func TestRunIsSingleUse(t *testing.T) {
	p := flow.New(newFake(), spec)
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); !errors.Is(err, flow.ErrSingleUse) {
		t.Fatalf("second Run = %v, want ErrSingleUse", err)
	}
}

func TestNewWithNilAdapterFailsStart(t *testing.T) {
	p := flow.New(nil, spec)
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(context.Background()); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "nil adapter") {
		t.Fatalf("Start = %v, want ErrInvalid naming the nil adapter", err)
	}
}

func TestSinkAfterStartFailsThePipeline(t *testing.T) {
	reported := make(chan error, 4)
	f := newFake()
	p := flow.New(f, spec, flow.WithErrorHandler(func(err error) { reported <- err }))
	src := p.Source()
	mapped := flow.Map(src, func(_ context.Context, d *ports.Delivery) (*ports.Delivery, error) { return d, nil })
	flow.Sink(mapped, func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	// A stage on a stream of this pipeline after Start.
	flow.Sink(flow.Map(mapped, func(_ context.Context, d *ports.Delivery) (*ports.Delivery, error) { return d, nil }), func(context.Context, *ports.Delivery) error { return nil })
	select {
	case err := <-reported:
		if !strings.Contains(err.Error(), "after Start") {
			t.Fatalf("reported %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stage added after Start was not reported")
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "after Start") {
		t.Fatalf("Err() = %v, want the late stage as the fatal error", err)
	}
}

func TestWaitSettled(t *testing.T) {
	f, p := start(t, spec, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	})
	go f.push(delivery(`{}`, 0), delivery(`{}`, 0), delivery(`{}`, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.WaitSettled(ctx, 3); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := p.WaitSettled(short, 4); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "settled 3") {
		t.Fatalf("WaitSettled(4) = %v, want a deadline error saying 3 settled", err)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
