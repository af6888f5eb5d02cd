package operators_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// batchRig runs Batch over the source and hands each batch to handle.
func batchRig(t *testing.T, sp ports.SubscriptionSpec, o operators.BatchOptions, handle func(context.Context, operators.Batched[*ports.Delivery]) error) *rig {
	return newRig(t, sp, func(p *flow.Pipeline) {
		flow.Sink(operators.Batch(p.Source(), o), handle)
	})
}

func sizes(mu *sync.Mutex, got *[]int) func(context.Context, operators.Batched[*ports.Delivery]) error {
	return func(_ context.Context, b operators.Batched[*ports.Delivery]) error {
		mu.Lock()
		*got = append(*got, b.Len())
		mu.Unlock()
		return nil
	}
}

func TestBatchBySizeAcksEveryMember(t *testing.T) {
	var mu sync.Mutex
	var got []int
	r := batchRig(t, spec, operators.BatchOptions{Size: 3, Window: time.Hour}, sizes(&mu, &got))
	r.f.push(msgs(6)...)
	for id, ds := range func() map[string][]ports.Disposition { r.f.waitSettled(t, 6); return r.f.byID() }() {
		if len(ds) != 1 || ds[0].Action != ports.Ack {
			t.Fatalf("%s settled %v, want one ACK", id, actions(ds))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != 3 || got[1] != 3 {
		t.Fatalf("batch sizes %v, want [3 3]", got)
	}
}

func TestBatchWindowFlushesPartialBatch(t *testing.T) {
	var mu sync.Mutex
	var got []int
	r := batchRig(t, spec, operators.BatchOptions{Size: 100, Window: 20 * time.Millisecond}, sizes(&mu, &got))
	r.f.push(msgs(2)...)
	r.f.waitSettled(t, 2)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != 2 {
		t.Fatalf("batch sizes %v, want one batch of 2 closed by the window", got)
	}
}

func TestBatchMaxBytes(t *testing.T) {
	var mu sync.Mutex
	var got []int
	seen := make(chan struct{}, 5)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Batch(tap(p.Source(), seen), operators.BatchOptions{Size: 100, Window: time.Hour, MaxBytes: 10}), sizes(&mu, &got))
	})
	r.f.push(msg("aaaa", ""), msg("bbbb", ""), msg("cccc", ""), msg("0123456789ABC", ""), msg("dd", ""))
	// [aaaa bbbb], then [cccc] closed by the oversized one, then [0123456789ABC] alone
	waitN(t, seen, 5, "items reaching the batch")
	r.stop(t, true) // flushes [dd]
	mu.Lock()
	defer mu.Unlock()
	if want := []int{2, 1, 1, 1}; len(got) != 4 || got[0] != 2 || got[1] != 1 || got[2] != 1 || got[3] != 1 {
		t.Fatalf("batch sizes %v, want %v", got, want)
	}
}

func TestBatchDefaultsFromSubscriptionSpec(t *testing.T) {
	sp := spec
	sp.Batch = ports.BatchSpec{Size: 2, Window: time.Hour}
	var mu sync.Mutex
	var got []int
	r := batchRig(t, sp, operators.BatchOptions{}, sizes(&mu, &got))
	r.f.push(msgs(4)...)
	r.f.waitSettled(t, 4)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != 2 {
		t.Fatalf("batch sizes %v, want [2 2] from the spec", got)
	}
}

func TestBatchOneOutcomeForAll(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want ports.Action
	}{
		{"error requeues all", errTransient, ports.Requeue},
		{"poison dead-letters all", ports.Poisonf("bad batch"), ports.DeadLetter},
		{"batch error without isolation requeues all", (&operators.BatchError{Failed: map[int]error{0: errors.New("x")}}).Err(), ports.Requeue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := batchRig(t, spec, operators.BatchOptions{Size: 3, Window: time.Hour}, func(context.Context, operators.Batched[*ports.Delivery]) error { return tc.err })
			r.f.push(msgs(3)...)
			for _, s := range r.f.waitSettled(t, 3) {
				if s.disp.Action != tc.want {
					t.Fatalf("%s settled %v, want %v", s.id, s.disp.Action, tc.want)
				}
			}
		})
	}
}

func TestBatchIsolatePoisonDeadLettersOnlyNamedMembers(t *testing.T) {
	r := batchRig(t, spec, operators.BatchOptions{Size: 4, Window: time.Hour, IsolatePoison: true},
		func(_ context.Context, b operators.Batched[*ports.Delivery]) error {
			var be operators.BatchError
			for i, d := range b.Values {
				if string(d.Payload) == "bad" {
					be.Add(i, errors.New("price missing"))
				}
			}
			return be.Err()
		})
	ds := []*ports.Delivery{msg("ok", ""), msg("bad", ""), msg("ok", ""), msg("bad", "")}
	r.f.push(ds...)
	r.f.waitSettled(t, 4)
	got := r.f.byID()
	for i, d := range ds {
		s := got[d.ID]
		if len(s) != 1 {
			t.Fatalf("member %d settled %d times", i, len(s))
		}
		if string(d.Payload) == "bad" {
			if s[0].Action != ports.DeadLetter || !strings.Contains(s[0].ReasonText(), "price missing") {
				t.Fatalf("bad member %d settled %+v, want DEAD_LETTER with its reason", i, s[0])
			}
		} else if s[0].Action != ports.Ack {
			t.Fatalf("good member %d settled %v, want ACK", i, s[0].Action)
		}
	}
}

// A *flow.MemberOutcomes settles each member as it says, with or without
// IsolatePoison.
func TestBatchMemberOutcomesSettleEachMember(t *testing.T) {
	for _, isolate := range []bool{false, true} {
		r := batchRig(t, spec, operators.BatchOptions{Size: 4, Window: time.Hour, IsolatePoison: isolate},
			func(_ context.Context, b operators.Batched[*ports.Delivery]) error {
				var out flow.MemberOutcomes
				for i, d := range b.Values {
					switch string(d.Payload) {
					case "busy":
						out.Requeue(i, errors.New("shard busy"))
					case "bad":
						out.DeadLetter(i, errors.New("price missing"))
					}
				}
				return out.Err()
			})
		ds := []*ports.Delivery{msg("ok", ""), msg("busy", ""), msg("bad", ""), msg("ok", "")}
		r.f.push(ds...)
		r.f.waitSettled(t, 4)
		got := r.f.byID()
		want := map[string]ports.Action{"ok": ports.Ack, "busy": ports.Requeue, "bad": ports.DeadLetter}
		for i, d := range ds {
			s := got[d.ID]
			if len(s) != 1 || s[0].Action != want[string(d.Payload)] {
				t.Fatalf("IsolatePoison %v: member %d (%s) settled %+v, want once with %v", isolate, i, d.Payload, s, want[string(d.Payload)])
			}
		}
	}
}

func TestBatchIsolatePoisonWithPlainErrorRequeuesAll(t *testing.T) {
	r := batchRig(t, spec, operators.BatchOptions{Size: 2, Window: time.Hour, IsolatePoison: true},
		func(context.Context, operators.Batched[*ports.Delivery]) error {
			return (&operators.BatchError{Failed: map[int]error{7: errors.New("out of range")}}).Err()
		})
	r.f.push(msgs(2)...)
	for _, s := range r.f.waitSettled(t, 2) {
		if s.disp.Action != ports.Requeue {
			t.Fatalf("settled %v, want REQUEUE: a BatchError naming no member fails the batch", s.disp.Action)
		}
	}
}

func TestBatchFlushesPartialBatchWhenInputCloses(t *testing.T) {
	var mu sync.Mutex
	var got []int
	seen := make(chan struct{}, 3)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Batch(tap(p.Source(), seen), operators.BatchOptions{Size: 100, Window: time.Hour}), sizes(&mu, &got))
	})
	r.f.push(msgs(3)...)
	waitN(t, seen, 3, "items reaching the batch")
	r.stop(t, true) // stop receiving: the input closes and the partial batch is flushed in the drain
	if s := r.f.settlements(); len(s) != 3 || s[0].disp.Action != ports.Ack {
		t.Fatalf("settlements %v, want the 3 members of the flushed batch acked", s)
	}
}

func TestBatchCancelledMembersAreNotSettled(t *testing.T) {
	entered := make(chan struct{})
	seen := make(chan struct{}, 3)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		flow.Sink(operators.Batch(tap(p.Source(), seen), operators.BatchOptions{Size: 2, Window: time.Hour}), func(ctx context.Context, _ operators.Batched[*ports.Delivery]) error {
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		})
	})
	r.f.push(msgs(3)...) // one full batch being handled, one member held
	recv(t, entered, "the batch handler")
	waitN(t, seen, 3, "items reaching the batch")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v after cancellation; want nothing", s)
	}
	for id, e := range r.outcomes() {
		if e.Outcome.Kind != flow.Cancelled {
			t.Fatalf("%s ended %v, want cancelled", id, e.Outcome.Kind)
		}
	}
}

func TestBatchHandlerPanicRequeuesAll(t *testing.T) {
	r := batchRig(t, spec, operators.BatchOptions{Size: 2, Window: time.Hour}, func(context.Context, operators.Batched[*ports.Delivery]) error { panic("boom") })
	r.f.push(msgs(2)...)
	for _, s := range r.f.waitSettled(t, 2) {
		var pe *ports.PanicError
		if s.disp.Action != ports.Requeue || !errors.As(s.disp.Reason, &pe) {
			t.Fatalf("settled %+v, want REQUEUE with a PanicError", s.disp)
		}
	}
}

func TestBatchRejectsNegativeOptions(t *testing.T) {
	p := flow.New(newFake(), spec)
	flow.Sink(operators.Batch(p.Source(), operators.BatchOptions{Size: -1}),
		func(context.Context, operators.Batched[*ports.Delivery]) error { return nil })
	if err := p.Start(context.Background()); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Start returned %v, want an error wrapping ErrInvalid", err)
	}
}

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

// recyclingFake is fake whose subscription takes acknowledged deliveries
// back (ports.Recycler), recording their ids.
type recyclingFake struct {
	*fake
	rmu      sync.Mutex
	recycled []string
}

func (r *recyclingFake) Subscribe(context.Context, ports.SubscriptionSpec) (ports.Subscription, error) {
	return r, nil
}

func (r *recyclingFake) Recycle(ds []*ports.Delivery) {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	for _, d := range ds {
		r.recycled = append(r.recycled, d.ID)
	}
}

// recycledBy runs build over a recyclingFake, pushes n messages, waits
// for their settlements, stops the pipeline (every recycling is then
// done) and returns the ids recycled.
func recycledBy(t *testing.T, n int, build func(*flow.Pipeline)) []string {
	t.Helper()
	r := &recyclingFake{fake: newFake()}
	p := flow.New(r, spec)
	build(p)
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	r.push(msgs(n)...)
	r.waitSettled(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	r.rmu.Lock()
	defer r.rmu.Unlock()
	return r.recycled
}

// With ValuesOnly a batch carries no deliveries (Msgs nil) and its
// pipeline keeps recycling them; without it, the handler gets each
// member's delivery and nothing is recycled (the handler may keep them).
func TestBatchValuesOnlyKeepsTheDeliveriesInThePipeline(t *testing.T) {
	for _, valuesOnly := range []bool{false, true} {
		var b operators.Batched[int]
		recycled := len(recycledBy(t, 3, func(p *flow.Pipeline) {
			batches := operators.Batch(flow.Decode[int](p.Source()), operators.BatchOptions{Size: 3, Window: time.Hour, ValuesOnly: valuesOnly})
			flow.Sink(batches, func(_ context.Context, got operators.Batched[int]) error { b = got; return nil })
		}))
		// Stop returned after the handler did: b is set.
		if len(b.Values) != 3 || b.Values[0] != 0 || b.Values[2] != 2 {
			t.Fatalf("valuesOnly=%v: values %v, want [0 1 2]", valuesOnly, b.Values)
		}
		if valuesOnly && (b.Msgs != nil || recycled != 3) {
			t.Fatalf("ValuesOnly: Msgs %v and %d deliveries recycled, want no Msgs and all 3 recycled", b.Msgs, recycled)
		}
		if !valuesOnly && (len(b.Msgs) != 3 || recycled != 0) {
			t.Fatalf("without ValuesOnly: %d Msgs and %d deliveries recycled, want 3 Msgs and none recycled", len(b.Msgs), recycled)
		}
	}
}

// A batch of deliveries hands them out as its values: ValuesOnly does not
// make their pipeline recycle them.
func TestBatchValuesOnlyOfDeliveriesRecyclesNothing(t *testing.T) {
	recycled := recycledBy(t, 3, func(p *flow.Pipeline) {
		flow.Sink(operators.Batch(p.Source(), operators.BatchOptions{Size: 3, Window: time.Hour, ValuesOnly: true}),
			func(context.Context, operators.Batched[*ports.Delivery]) error { return nil })
	})
	if len(recycled) != 0 {
		t.Fatalf("recycled %v: deliveries handed to the handler as values must not be reused", recycled)
	}
}
