package flow_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func TestStopCancelsPendingWorkAndAcksNothing(t *testing.T) {
	f := newFake()
	entered := make(chan struct{}, 2)
	p := flow.New(f, spec)
	flow.Sink(p.Source(), func(ctx context.Context, _ *ports.Delivery) error {
		entered <- struct{}{}
		<-ctx.Done() // completion pending until stop cancels it
		return ctx.Err()
	}, flow.Workers(2))
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.push(delivery(`{}`, 0), delivery(`{}`, 0))
	<-entered
	<-entered
	expired, cancel := context.WithCancel(context.Background())
	cancel() // no drain: cancel in-flight work at once
	var ae *flow.AbandonedError
	if err := p.Stop(expired); !errors.As(err, &ae) || ae.InFlight != 2 || ae.Cancelled != 2 {
		t.Fatalf("Stop = %v, want an *AbandonedError naming 2 in-flight deliveries, 2 cancelled", err)
	}
	if s := f.settlements(); len(s) != 0 {
		t.Fatalf("stop settled %v; stop must never settle", s)
	}
	if st := p.Stats(); st.Cancelled != 2 || st.Acked != 0 {
		t.Fatalf("stats %+v, want 2 cancelled, 0 acked", st)
	}
}

func TestStopDrainsInFlightWorkBeforeCancelling(t *testing.T) {
	f := newFake()
	release := make(chan struct{})
	entered := make(chan struct{})
	p := flow.New(f, spec)
	flow.Sink(p.Source(), func(ctx context.Context, _ *ports.Delivery) error {
		close(entered)
		<-release
		return nil
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.push(delivery(`{}`, 0))
	<-entered
	stopped := make(chan error)
	go func() { stopped <- p.Stop(context.Background()) }()
	close(release) // the handler finishes during the drain: a real success
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return within 5s")
	}
	if s := f.settlements(); len(s) != 1 || s[0].disp.Action != ports.Ack {
		t.Fatalf("settlements %v, want the drained success acked", s)
	}
}

func TestCompletionAfterStopIsNotSettled(t *testing.T) {
	held := make(chan *flow.Completion, 1)
	var late atomic.Int32
	f2 := newFake()
	p2 := flow.New(f2, spec, flow.WithErrorHandler(func(err error) {
		var le *flow.LateCompletionError
		if errors.As(err, &le) {
			late.Add(1)
		}
	}))
	out := flow.Via(p2.Source(), func(it flow.Item[*ports.Delivery], _ flow.Emit[struct{}]) {
		held <- it.Completion
	})
	flow.Sink(out, func(context.Context, struct{}) error { return nil })
	if err := p2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f2.push(delivery(`{}`, 0))
	c := <-held
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	var ae *flow.AbandonedError
	if err := p2.Stop(expired); !errors.As(err, &ae) || ae.InFlight != 1 {
		t.Fatalf("Stop = %v, want an *AbandonedError naming the 1 held delivery", err)
	}
	if err := c.Succeed(); err != nil {
		t.Fatalf("late Succeed: %v", err)
	}
	if s := f2.settlements(); len(s) != 0 {
		t.Fatalf("a completion after stop was settled: %v", s)
	}
	if late.Load() != 1 || p2.Stats().Unsettled != 1 {
		t.Fatalf("late completions reported %d, unsettled %d; want 1 and 1", late.Load(), p2.Stats().Unsettled)
	}
}

func TestConflictingSecondOutcomeIsReportedNotSettled(t *testing.T) {
	conflicts := make(chan error, 2)
	f, p := start(t, spec, func(p *flow.Pipeline) {
		out := flow.Via(p.Source(), func(it flow.Item[*ports.Delivery], emit flow.Emit[*ports.Delivery]) {
			_ = it.Succeed()                         // completes: ACK
			conflicts <- it.Fail(ports.Poisonf("x")) // conflicts
			conflicts <- it.Succeed()                // repeats
		})
		flow.Sink(out, func(context.Context, *ports.Delivery) error { return nil })
	})
	f.push(delivery(`{}`, 0))
	if err := <-conflicts; !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("second, different outcome returned %v, want ErrConflict", err)
	}
	if err := <-conflicts; !errors.Is(err, ports.ErrAlreadyCompleted) {
		t.Fatalf("repeated outcome returned %v, want ErrAlreadyCompleted", err)
	}
	s := f.waitSettled(t, 1)
	if len(s) != 1 || s[0].disp.Action != ports.Ack {
		t.Fatalf("settlements %v, want exactly one ACK", s)
	}
	waitStats(t, p, "1 conflict", func(st flow.Stats) bool { return st.Conflicts == 1 })
}

func TestCancellationSettlesNothing(t *testing.T) {
	f, p := start(t, spec, func(p *flow.Pipeline) {
		out := flow.Via(p.Source(), func(it flow.Item[*ports.Delivery], _ flow.Emit[int]) {
			_ = it.Completion.Cancel(context.Canceled)
		})
		flow.Sink(out, func(context.Context, int) error { return nil })
	})
	f.push(delivery(`{}`, 0), delivery(`{}`, 0))
	waitStats(t, p, "2 cancellations counted", func(st flow.Stats) bool { return st.Cancelled >= 2 })
	if s := f.settlements(); len(s) != 0 {
		t.Fatalf("cancelled deliveries were settled: %v", s)
	}
	waitStats(t, p, "the cancelled deliveries' in-flight slots released", func(st flow.Stats) bool { return st.InFlight == 0 })
}

func TestInFlightNeverExceedsLimit(t *testing.T) {
	sp := spec
	sp.InFlight = 4
	var cur, peak atomic.Int32
	f, _ := start(t, sp, func(p *flow.Pipeline) {
		flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error {
			n := cur.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(200 * time.Microsecond) // a slow handler, not synchronisation
			cur.Add(-1)
			return nil
		}, flow.Workers(16))
	})
	for range 200 {
		f.push(delivery(`{}`, 0))
	}
	f.waitSettled(t, 200)
	f.mu.Lock()
	maxOut := f.maxOut
	f.mu.Unlock()
	if maxOut > 4 || peak.Load() > 4 {
		t.Fatalf("in flight peaked at %d handed out / %d handled, limit 4", maxOut, peak.Load())
	}
}

func TestRunStopsOnContextAndReturnsNil(t *testing.T) {
	f := newFake()
	p := flow.New(f, spec, flow.WithDrainTimeout(0))
	var n atomic.Int32
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { n.Add(1); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() { defer wg.Done(); runErr = p.Run(ctx) }()
	f.push(delivery(`{}`, 0))
	f.waitSettled(t, 1)
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("Run after cancel: %v, want nil", runErr)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed after Run returned")
	}
}
