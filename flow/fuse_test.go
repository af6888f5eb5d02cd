package flow_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// goid is the running goroutine's id, read from its stack header
// ("goroutine 42 [running]:"). Test-only: it tells which stages share a
// goroutine.
func goid() uint64 {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(s[:bytes.IndexByte(s, ' ')]), 10, 64)
	return n
}

type stageRecord struct {
	mu           sync.Mutex
	decode, sink map[uint64]bool
	order        []int
}

// runStages pushes n deliveries through Map (as Decode) → Sink built with
// the given stage options and records on which goroutines each stage ran
// and in which order the sink saw the items.
func runStages(t *testing.T, n int, mapOpts, sinkOpts []flow.StageOption) *stageRecord {
	t.Helper()
	rec := &stageRecord{decode: map[uint64]bool{}, sink: map[uint64]bool{}}
	f, _ := start(t, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 8}, func(p *flow.Pipeline) {
		vals := atoiOn(p.Source(), &rec.mu, rec.decode, mapOpts)
		flow.Sink(vals, func(_ context.Context, v int) error {
			rec.mu.Lock()
			rec.sink[goid()] = true
			rec.order = append(rec.order, v)
			rec.mu.Unlock()
			return nil
		}, sinkOpts...)
	})
	pushNumbered(t, f, n)
	return rec
}

// atoiOn maps each payload of in to the number it spells, recording in
// gids (under mu) the goroutines the map ran on.
func atoiOn(in flow.Stream[*ports.Delivery], mu *sync.Mutex, gids map[uint64]bool, opts []flow.StageOption) flow.Stream[int] {
	return flow.Map(in, func(_ context.Context, d *ports.Delivery) (int, error) {
		mu.Lock()
		gids[goid()] = true
		mu.Unlock()
		return strconv.Atoi(string(d.Payload))
	}, opts...)
}

// pushNumbered pushes n deliveries with payloads 0..n-1 and waits until
// every one is acked.
func pushNumbered(t *testing.T, f *fakeAdapter, n int) {
	t.Helper()
	for i := range n {
		f.push(delivery(strconv.Itoa(i), 0))
	}
	for _, s := range f.waitSettled(t, n) {
		if s.disp.Action != ports.Ack {
			t.Fatalf("settlement %v, want every delivery acked", s)
		}
	}
}

// TestOneWorkerStagesRunInlineOnTheSource: one-worker stages after the
// source run on the source's goroutine (no hand-off per item), in order.
func TestOneWorkerStagesRunInlineOnTheSource(t *testing.T) {
	const n = 200
	rec := runStages(t, n, nil, nil)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.decode) != 1 || len(rec.sink) != 1 {
		t.Fatalf("map ran on %d goroutines, sink on %d; want one each", len(rec.decode), len(rec.sink))
	}
	for g := range rec.decode {
		if !rec.sink[g] {
			t.Fatalf("map (goroutine %d) and sink (%v) ran on different goroutines: not fused", g, rec.sink)
		}
	}
	for i, v := range rec.order {
		if v != i {
			t.Fatalf("sink saw %d at position %d: order not kept (%v)", v, i, rec.order[:min(len(rec.order), 20)])
		}
	}
}

// TestBufferAndWorkersKeepTheHandOff: Buffer on a stage keeps the channel
// after it (the next stage has a goroutine of its own); Workers(n>1) on
// the consumer does too.
func TestBufferAndWorkersKeepTheHandOff(t *testing.T) {
	for _, tc := range []struct {
		name           string
		mapOpts, sinks []flow.StageOption
	}{
		{"Buffer on the map", []flow.StageOption{flow.Buffer(4)}, nil},
		{"Workers(3) on the sink", nil, []flow.StageOption{flow.Workers(3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := runStages(t, 50, tc.mapOpts, tc.sinks)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for g := range rec.sink {
				if rec.decode[g] {
					t.Fatalf("sink ran on the map's goroutine %d; want a hand-off", g)
				}
			}
		})
	}
}

// TestFusedSinkPanicFailsTheItem: a panic in a sink run inline fails its
// item (requeued with the panic as reason) and the source goes on.
func TestFusedSinkPanicFailsTheItem(t *testing.T) {
	f, p := start(t, spec, func(p *flow.Pipeline) {
		vals := flow.Map(p.Source(), func(_ context.Context, d *ports.Delivery) (string, error) { return string(d.Payload), nil })
		flow.Sink(vals, func(_ context.Context, v string) error {
			if v == "boom" {
				panic("boom")
			}
			return nil
		})
	}, flow.WithErrorHandler(func(error) {}))
	f.push(delivery("boom", 0), delivery("ok", 0))
	got := f.waitSettled(t, 2)
	var acks, requeues int
	for _, s := range got {
		switch s.disp.Action {
		case ports.Ack:
			acks++
		case ports.Requeue:
			requeues++
			var pe *ports.PanicError
			if !errors.As(s.disp.Reason, &pe) {
				t.Fatalf("requeue reason %v, want a *ports.PanicError", s.disp.Reason)
			}
		}
	}
	if acks != 1 || requeues != 1 {
		t.Fatalf("settlements %v; want the panicking item requeued and the other acked", got)
	}
	// The engine counts a settlement once Settle has returned.
	waitStats(t, p, "nothing in flight after both settled", func(s flow.Stats) bool { return s.InFlight == 0 })
}

// pairs is a gatherer that emits every two items as one joined item (a
// batch of two) and the odd one out at Close. It records on which
// goroutines it was pushed, and fails the test on overlapping pushes or a
// push after Close.
type pairs struct {
	t     *testing.T
	emit  flow.Emit[[]int]
	ctx   context.Context
	vals  []int
	cs    []*flow.Completion
	busy  atomic.Int32
	mu    sync.Mutex
	gids  map[uint64]bool
	shut  bool
	yield func() // called inside Push, to widen the window for overlaps
}

func (g *pairs) Push(it flow.Item[int]) {
	if g.busy.Add(1) != 1 {
		g.t.Errorf("Push called while another Push ran")
	}
	defer g.busy.Add(-1)
	g.mu.Lock()
	g.gids[goid()] = true
	if g.shut {
		g.t.Errorf("Push after Close")
	}
	g.mu.Unlock()
	if g.yield != nil {
		g.yield()
	}
	g.vals, g.cs = append(g.vals, it.Value), append(g.cs, it.Completion)
	if len(g.cs) == 2 {
		g.flush()
	}
}

func (g *pairs) flush() {
	if len(g.cs) == 0 {
		return
	}
	g.emit(flow.Item[[]int]{Ctx: g.ctx, Value: g.vals, Completion: flow.Join(g.cs...)})
	g.vals, g.cs = nil, nil
}

func (g *pairs) Close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
	g.flush()
}

type gatherRecord struct {
	mu         sync.Mutex
	mapGids    map[uint64]bool
	sinkGids   map[uint64]bool
	order      []int
	concurrent atomic.Int32
	g          *pairs
}

// runGather runs n deliveries (payloads 0..n-1) through Map → Gather(pairs)
// → Sink and waits until every one is settled.
func runGather(t *testing.T, n int, mapOpts []flow.StageOption, yield func()) *gatherRecord {
	t.Helper()
	rec := &gatherRecord{mapGids: map[uint64]bool{}, sinkGids: map[uint64]bool{}}
	f, _ := start(t, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 16}, func(p *flow.Pipeline) {
		vals := atoiOn(p.Source(), &rec.mu, rec.mapGids, mapOpts)
		batches := flow.Gather(vals, func(ctx context.Context, emit flow.Emit[[]int]) flow.Gatherer[int] {
			rec.g = &pairs{t: t, emit: emit, ctx: ctx, gids: map[uint64]bool{}, yield: yield}
			return rec.g
		})
		flow.Sink(batches, func(_ context.Context, b []int) error {
			if rec.concurrent.Add(1) != 1 {
				t.Errorf("the sink ran two batches at once")
			}
			defer rec.concurrent.Add(-1)
			rec.mu.Lock()
			rec.sinkGids[goid()] = true
			rec.order = append(rec.order, b...)
			rec.mu.Unlock()
			return nil
		})
	})
	pushNumbered(t, f, n)
	return rec
}

// TestGatherPushesOnTheUpstreamGoroutine: a Gather after one-worker stages
// takes its items on their goroutine (no hand-off per item), in order,
// and only what it emits crosses to the sink's goroutine.
func TestGatherPushesOnTheUpstreamGoroutine(t *testing.T) {
	const n = 200
	rec := runGather(t, n, nil, nil)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.g.mu.Lock()
	defer rec.g.mu.Unlock()
	if len(rec.mapGids) != 1 || len(rec.g.gids) != 1 {
		t.Fatalf("map ran on %d goroutines, Push on %d; want one each", len(rec.mapGids), len(rec.g.gids))
	}
	for g := range rec.mapGids {
		if !rec.g.gids[g] {
			t.Fatalf("map (goroutine %d) and Push (%v) ran on different goroutines: not fused", g, rec.g.gids)
		}
		if rec.sinkGids[g] {
			t.Fatalf("the sink ran on the source's goroutine %d; want the batches handed over", g)
		}
	}
	for i, v := range rec.order {
		if v != i {
			t.Fatalf("sink saw %d at position %d: order not kept (%v)", v, i, rec.order[:min(len(rec.order), 20)])
		}
	}
}

// TestGatherAfterSeveralWorkersPushesOneAtATime: when the stage before it
// runs several workers, Gather takes their items on a goroutine of its
// own, never two pushes at once.
func TestGatherAfterSeveralWorkersPushesOneAtATime(t *testing.T) {
	const n = 300
	rec := runGather(t, n, []flow.StageOption{flow.Workers(3)}, runtime.Gosched)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.order) != n {
		t.Fatalf("sink saw %d values, want %d", len(rec.order), n)
	}
	rec.g.mu.Lock()
	defer rec.g.mu.Unlock()
	for g := range rec.g.gids {
		if rec.mapGids[g] {
			t.Fatalf("Push ran on a map worker's goroutine %d; want a goroutine of the stage's own", g)
		}
	}
}

// TestGatherCloseFlushesWithinTheDrain: what the gatherer holds when the
// input ends is emitted by Close and settled in the drain.
func TestGatherCloseFlushesWithinTheDrain(t *testing.T) {
	f := newFake()
	p := flow.New(f, spec)
	received := make(chan struct{}, 3)
	var g *pairs
	vals := flow.Map(p.Source(), func(_ context.Context, d *ports.Delivery) (int, error) {
		received <- struct{}{}
		return strconv.Atoi(string(d.Payload))
	})
	flow.Sink(flow.Gather(vals, func(ctx context.Context, emit flow.Emit[[]int]) flow.Gatherer[int] {
		g = &pairs{t: t, emit: emit, ctx: ctx, gids: map[uint64]bool{}}
		return g
	}), func(context.Context, []int) error { return nil })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.push(delivery("1", 0), delivery("2", 0), delivery("3", 0))
	for range 3 {
		select {
		case <-received:
		case <-time.After(5 * time.Second):
			t.Fatal("the 3 deliveries did not reach the map within 5s")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v (the held item must be flushed by Close and settled in the drain)", err)
	}
	if s := f.settlements(); len(s) != 3 {
		t.Fatalf("settlements %v, want the 3 deliveries acked", s)
	}
	if !g.shut {
		t.Fatal("Close was not called")
	}
}

// TestGatherPanicIsFatal: a panic in Push stops the pipeline with a
// *ports.PanicError, and the items that arrive afterwards are cancelled,
// not pushed.
func TestGatherPanicIsFatal(t *testing.T) {
	f := newFake()
	errs := make(chan error, 4)
	// The drain is short: the delivery the panicking Push held never completes.
	p := flow.New(f, spec, flow.WithErrorHandler(func(err error) { errs <- err }), flow.WithDrainTimeout(50*time.Millisecond),
		flow.WithLogger(slog.New(slog.DiscardHandler))) // the panic is logged with its stack
	var pushed atomic.Int32
	flow.Sink(flow.Gather(p.Source(), func(ctx context.Context, emit flow.Emit[int]) flow.Gatherer[*ports.Delivery] {
		return gatherFunc(func(it flow.Item[*ports.Delivery]) {
			pushed.Add(1)
			panic("boom")
		})
	}), func(context.Context, int) error { return nil })
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.push(delivery("a", 0))
	select {
	case err := <-errs:
		var pe *ports.PanicError
		if !errors.As(err, &pe) {
			t.Fatalf("reported %v, want a *ports.PanicError", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no panic reported within 5s")
	}
	f.push(delivery("b", 0))
	waitStats(t, p, "the delivery after the panic cancelled", func(s flow.Stats) bool { return s.Cancelled == 1 })
	var pe *ports.PanicError
	if !errors.As(p.Err(), &pe) {
		t.Fatalf("Err() = %v, want the panic as the pipeline's fatal error", p.Err())
	}
	if n := pushed.Load(); n != 1 {
		t.Fatalf("Push called %d times, want once: the stage gave up after the panic", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ab *flow.AbandonedError
	if err := p.Stop(ctx); !errors.As(err, &ab) || ab.Open != 1 {
		t.Fatalf("Stop = %v, want the delivery the panicking Push held left open (redelivered)", err)
	}
	if s := f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v, want nothing", s)
	}
}

type gatherFunc func(flow.Item[*ports.Delivery])

func (g gatherFunc) Push(it flow.Item[*ports.Delivery]) { g(it) }
func (g gatherFunc) Close()                             {}
