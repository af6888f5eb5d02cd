package flow_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"

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
		vals := flow.Map(p.Source(), func(_ context.Context, d *ports.Delivery) (int, error) {
			rec.mu.Lock()
			rec.decode[goid()] = true
			rec.mu.Unlock()
			return strconv.Atoi(string(d.Payload))
		}, mapOpts...)
		flow.Sink(vals, func(_ context.Context, v int) error {
			rec.mu.Lock()
			rec.sink[goid()] = true
			rec.order = append(rec.order, v)
			rec.mu.Unlock()
			return nil
		}, sinkOpts...)
	})
	for i := range n {
		f.push(delivery(strconv.Itoa(i), 0))
	}
	for _, s := range f.waitSettled(t, n) {
		if s.disp.Action != ports.Ack {
			t.Fatalf("settlement %v, want every delivery acked", s)
		}
	}
	return rec
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
