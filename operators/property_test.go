package operators_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

type outcome int

const (
	succeed outcome = iota
	fail
	poison
	panics
	classified // fails with errClassified, which a Classify stage turns into poison
)

var errClassified = errors.New("classified as poison by rule")

// stageNames are the operators a random pipeline is made of; every stage
// keeps the stream a Stream[int] of delivery indexes.
var stageNames = []string{"filter", "flatmap", "batch", "batch-isolate", "concurrent", "concurrent-ordered",
	"keyed", "delay", "throttle", "timeout", "classify", "dedupe", "window", "redelivery-limit"}

func addStage(name string, s flow.Stream[int]) flow.Stream[int] {
	id := func(_ context.Context, i int) (int, error) { return i, nil }
	switch name {
	case "filter":
		return flow.Filter(s, func(_ context.Context, i int) (bool, error) { return i%5 != 0, nil })
	case "flatmap":
		return flow.FlatMap(s, func(_ context.Context, i int) ([]int, error) { return []int{i, i}, nil })
	case "batch", "batch-isolate":
		b := operators.Batch(s, operators.BatchOptions{Size: 3, Window: 2 * time.Millisecond, IsolatePoison: name == "batch-isolate"})
		return flow.FlatMap(b, func(_ context.Context, b operators.Batched[int]) ([]int, error) { return b.Values, nil })
	case "concurrent", "concurrent-ordered":
		return operators.Concurrent(s, id, operators.ConcurrentOptions{Limit: 3, Ordered: name == "concurrent-ordered"})
	case "keyed":
		return operators.KeyOrdered(s, id, operators.KeyOrderedOptions[int]{Limit: 3, Key: func(it flow.Item[int]) string { return strconv.Itoa(it.Value % 3) }})
	case "delay":
		return operators.Delay(s, time.Millisecond)
	case "throttle":
		return operators.Throttle(s, operators.ThrottleOptions{Rate: 20000, Burst: 20})
	case "timeout":
		return operators.Timeout(s, 10*time.Second)
	case "classify":
		return operators.Classify(s, operators.Classifier{Rules: []operators.Rule{operators.PoisonIs(errClassified)}})
	case "dedupe":
		return operators.Dedupe(s, operators.DedupeOptions[int]{})
	case "window":
		w := operators.Window(s, operators.WindowOptions[int, int]{Size: 2 * time.Millisecond, Key: func(it flow.Item[int]) int { return it.Value % 2 }},
			func(acc []int, i int) []int { return append(acc, i) })
		return flow.FlatMap(w, func(_ context.Context, p operators.Pane[int, []int]) ([]int, error) { return p.Value, nil })
	case "redelivery-limit":
		return operators.RedeliveryLimit(s, 100)
	}
	panic("unknown stage " + name)
}

// TestPropertyRandomPipelinesSettleEachDeliveryOnce builds random pipelines
// of operators, feeds them deliveries with random handler outcomes, and
// either drains them (every delivery settled exactly once, and as its
// outcome says where the pipeline keeps items apart) or cancels them at a
// random point (every received delivery ends exactly once: settled, or
// cancelled with no settlement).
func TestPropertyRandomPipelinesSettleEachDeliveryOnce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 30).Draw(rt, "deliveries")
		outs := rapid.SliceOfN(rapid.SampledFrom([]outcome{succeed, succeed, fail, poison, panics, classified}), n, n).Draw(rt, "outcomes")
		stages := rapid.SliceOfN(rapid.SampledFrom(stageNames), 0, 4).Draw(rt, "stages")
		cancelAfter := rapid.IntRange(-1, n).Draw(rt, "cancel after settlements (-1: drain)")

		sp := spec
		sp.InFlight = rapid.IntRange(1, 16).Draw(rt, "in-flight")
		if slices.Contains(stages, "batch") || slices.Contains(stages, "batch-isolate") {
			// A batch of 3 needs 3 deliveries in flight: Start refuses a
			// smaller limit that was set.
			sp.InFlight = max(sp.InFlight, 3)
		}
		r := newRig(rt, sp, func(p *flow.Pipeline) {
			s := flow.Map(p.Source(), func(_ context.Context, d *ports.Delivery) (int, error) { return strconv.Atoi(string(d.Payload)) })
			for _, name := range stages {
				s = addStage(name, s)
			}
			flow.Sink(s, func(_ context.Context, i int) error {
				switch outs[i] {
				case fail:
					return errTransient
				case poison:
					return ports.Poisonf("bad %d", i)
				case panics:
					panic("boom")
				case classified:
					return errClassified
				}
				return nil
			}, flow.Workers(2))
		})
		ds := make([]*ports.Delivery, n)
		for i := range ds {
			ds[i] = msg(strconv.Itoa(i), "")
		}
		r.f.push(ds...)

		if cancelAfter >= 0 {
			if cancelAfter > 0 {
				r.f.waitSettled(rt, cancelAfter)
			}
			r.stop(rt, false) // checks: every received delivery ended exactly once, no conflicts
			for id, got := range r.f.byID() {
				if len(got) > 1 {
					rt.Fatalf("%s settled %d times", id, len(got))
				}
			}
			return
		}
		ended := r.waitEnded(rt, n)
		r.stop(rt, true)
		got := r.f.byID()
		exact := !slices.ContainsFunc(stages, func(s string) bool { return s == "batch" || s == "batch-isolate" || s == "window" })
		for i, d := range ds {
			if e := ended[d.ID]; e.Action == 0 {
				rt.Fatalf("delivery %d ended %v without a settlement while draining", i, e.Outcome.Kind)
			}
			if len(got[d.ID]) != 1 {
				rt.Fatalf("delivery %d settled %d times", i, len(got[d.ID]))
			}
			if exact {
				if want := expected(i, outs[i], stages); got[d.ID][0].Action != want {
					rt.Fatalf("delivery %d (%v through %v) settled %v, want %v", i, outs[i], stages, got[d.ID][0].Action, want)
				}
			}
		}
	})
}

// expected is the settlement of delivery i for a pipeline whose stages keep
// deliveries apart (no batch, no window).
func expected(i int, o outcome, stages []string) ports.Action {
	if slices.Contains(stages, "filter") && i%5 == 0 {
		return ports.Ack
	}
	switch o {
	case fail, panics:
		return ports.Requeue
	case poison:
		return ports.DeadLetter
	case classified:
		if slices.Contains(stages, "classify") {
			return ports.DeadLetter
		}
		return ports.Requeue
	}
	return ports.Ack
}
