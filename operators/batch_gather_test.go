package operators_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

// batchOrder records what a batch sink saw: the members' payloads in the
// order the batches arrived, the batch sizes, and whether two batches
// were ever handled at once.
type batchOrder struct {
	mu      sync.Mutex
	values  []int
	sizes   []int
	running atomic.Int32
	overlap atomic.Bool
}

func (o *batchOrder) sink(_ context.Context, b operators.Batched[*ports.Delivery]) error {
	if o.running.Add(1) != 1 {
		o.overlap.Store(true)
	}
	defer o.running.Add(-1)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sizes = append(o.sizes, b.Len())
	for _, d := range b.Values {
		v, _ := strconv.Atoi(string(d.Payload))
		o.values = append(o.values, v)
	}
	return nil
}

// check fails unless the sink saw 0..n-1 in order, in batches of at most
// size, one batch at a time.
func (o *batchOrder) check(t *testing.T, n, size int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.overlap.Load() {
		t.Fatal("the one-worker sink handled two batches at once")
	}
	if len(o.values) != n {
		t.Fatalf("the sink saw %d members, want %d", len(o.values), n)
	}
	for i, v := range o.values {
		if v != i {
			t.Fatalf("member %d at position %d: order not kept across batches (sizes %v)", v, i, o.sizes)
		}
	}
	for _, s := range o.sizes {
		if s < 1 || s > size {
			t.Fatalf("batch sizes %v, want 1..%d", o.sizes, size)
		}
	}
}

// numbered returns n deliveries with payloads 0..n-1.
func numbered(from, n int) []*ports.Delivery {
	ds := make([]*ports.Delivery, n)
	for i := range ds {
		ds[i] = msg(strconv.Itoa(from+i), "")
	}
	return ds
}

// The window timer closes batches on a goroutine of its own while members
// are added on the source's: every batch still reaches the one-worker sink
// alone and in order, members in arrival order, each delivery acked once.
func TestBatchWindowFlushesKeepOrderWithPushes(t *testing.T) {
	const n, size = 600, 7
	var o batchOrder
	r := batchRig(t, spec, operators.BatchOptions{Size: size, Window: 50 * time.Microsecond}, o.sink)
	for from := 0; from < n; from += 25 { // in bursts: partial batches close by the window
		r.f.push(numbered(from, 25)...)
	}
	r.f.waitSettled(t, n)
	for id, ds := range r.f.byID() {
		if len(ds) != 1 || ds[0].Action != ports.Ack {
			t.Fatalf("%s settled %v, want one ACK", id, actions(ds))
		}
	}
	o.check(t, n, size)
}

// After a stage with several workers Batch takes the items on a
// goroutine of its own: every member is batched once, none lost.
func TestBatchAfterSeveralWorkers(t *testing.T) {
	const n, size = 300, 8
	var mu sync.Mutex
	var got []int
	r := newRig(t, spec, func(p *flow.Pipeline) {
		spread := flow.Map(p.Source(), func(_ context.Context, d *ports.Delivery) (*ports.Delivery, error) { return d, nil }, flow.Workers(3))
		flow.Sink(operators.Batch(spread, operators.BatchOptions{Size: size, Window: time.Millisecond}), sizes(&mu, &got))
	})
	r.f.push(msgs(n)...)
	for id, ds := range func() map[string][]ports.Disposition { r.f.waitSettled(t, n); return r.f.byID() }() {
		if len(ds) != 1 || ds[0].Action != ports.Ack {
			t.Fatalf("%s settled %v, want one ACK", id, actions(ds))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, s := range got {
		if s < 1 || s > size {
			t.Fatalf("batch sizes %v, want 1..%d", got, size)
		}
		total += s
	}
	if total != n {
		t.Fatalf("batches hold %d members, want %d", total, n)
	}
}

// When the pipeline cancels, the batch being handled, the batch waiting
// for the sink and the member held are all cancelled: nothing is settled
// and every delivery ends once.
func TestBatchCancelsHeldAndQueuedBatches(t *testing.T) {
	entered := make(chan struct{})
	seen := make(chan struct{}, 64)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Batch(tap(p.Source(), seen), operators.BatchOptions{Size: 2, Window: time.Hour}), func(ctx context.Context, _ operators.Batched[*ports.Delivery]) error {
			select {
			case <-entered:
			default:
				close(entered)
			}
			<-ctx.Done()
			return ctx.Err()
		})
	})
	r.f.push(msgs(5)...) // a batch handled until cancelled, one queued, one member held
	recv(t, entered, "the batch handler")
	waitN(t, seen, 5, "items reaching the batch")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v after cancellation; want nothing", s)
	}
	for id, e := range r.waitEnded(t, 5) {
		if e.Outcome.Kind != flow.Cancelled {
			t.Fatalf("%s ended %v, want cancelled", id, e.Outcome.Kind)
		}
	}
}
