package operators_test

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
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

// lockedBuffer is a bytes.Buffer safe for the logger's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A batch larger than the default in-flight limit (64) used to be cut at
// 64 deliveries and wait out its window; the limit is now raised to the
// batch size, and Start says so.
func TestBatchLargerThanDefaultInFlightRaisesTheLimit(t *testing.T) {
	var logs lockedBuffer
	f := newFake()
	p := flow.New(f, spec, flow.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	batches := make(chan int, 4)
	flow.Sink(operators.Batch(p.Source(), operators.BatchOptions{Size: 100, Window: time.Hour}),
		func(_ context.Context, b operators.Batched[*ports.Delivery]) error {
			batches <- b.Len()
			return nil
		})
	if got := p.Spec().InFlight; got != 100 {
		t.Fatalf("Spec().InFlight = %d, want 100 (raised to the batch size)", got)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	f.push(msgs(100)...)
	select {
	case n := <-batches:
		if n != 100 {
			t.Fatalf("first batch has %d members, want 100", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no batch within 10s: the batch of 100 was cut short by the in-flight limit and waits out its one-hour window")
	}
	f.waitSettled(t, 100)
	out := logs.String()
	if !strings.Contains(out, "in-flight limit raised") || !strings.Contains(out, "in_flight=100") ||
		!strings.Contains(out, "was=64") || !strings.Contains(out, "stage=operators.Batch") {
		t.Fatalf("Start did not log the raise:\n%s", out)
	}
}

// An in-flight limit the user set is kept: a batch that cannot fit in it
// makes Start fail with a clear error instead of cutting every batch.
func TestBatchLargerThanASetInFlightFailsAtStart(t *testing.T) {
	sp := spec
	sp.InFlight = 32
	p := flow.New(newFake(), sp)
	flow.Sink(operators.Batch(p.Source(), operators.BatchOptions{Size: 100}),
		func(context.Context, operators.Batched[*ports.Delivery]) error { return nil })
	err := p.Start(context.Background())
	if err == nil {
		_ = p.Stop(context.Background())
		t.Fatal("Start succeeded with a batch of 100 under an in-flight limit of 32")
	}
	if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "operators.Batch") || !strings.Contains(err.Error(), "InFlight") {
		t.Fatalf("Start = %v, want ErrInvalid naming operators.Batch and InFlight", err)
	}
	if got := p.Spec().InFlight; got != 32 {
		t.Fatalf("Spec().InFlight = %d, want the 32 the user set", got)
	}
}

// The default batch size still fits the limit the user set.
func TestBatchDefaultSizeFitsASetInFlight(t *testing.T) {
	sp := spec
	sp.InFlight = 10
	var mu sync.Mutex
	var got []int
	r := batchRig(t, sp, operators.BatchOptions{Window: time.Hour}, sizes(&mu, &got))
	r.f.push(msgs(10)...)
	r.f.waitSettled(t, 10)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != 10 {
		t.Fatalf("batch sizes %v, want [10]", got)
	}
}
