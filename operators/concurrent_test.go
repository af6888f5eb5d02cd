package operators_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func TestConcurrentOrderedKeepsInputOrderUnderLimit(t *testing.T) {
	const n = 200
	var running, peak atomic.Int32
	got := make(chan int, n)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		res := operators.Concurrent(p.Source(), func(_ context.Context, d *ports.Delivery) (int, error) {
			cur := running.Add(1)
			defer running.Add(-1)
			for old := peak.Load(); cur > old && !peak.CompareAndSwap(old, cur); old = peak.Load() {
			}
			i, _ := strconv.Atoi(string(d.Payload))
			if i%7 == 3 {
				return 0, errTransient
			}
			return i, nil
		}, operators.ConcurrentOptions{Limit: 4, Ordered: true})
		flow.Sink(res, func(_ context.Context, i int) error { got <- i; return nil })
	})
	r.f.push(msgs(n)...)
	r.f.waitSettled(t, n)
	close(got)
	last := -1
	for i := range got {
		if i <= last {
			t.Fatalf("result %d after %d: order lost", i, last)
		}
		last = i
	}
	if peak.Load() > 4 {
		t.Fatalf("%d calls at once, limit 4", peak.Load())
	}
	req := 0
	for _, s := range r.f.settlements() {
		if s.disp.Action == ports.Requeue {
			req++
		}
	}
	if want := n / 7; req < want-1 || req > want+1 {
		t.Fatalf("%d requeued, want about %d (the failing items)", req, want)
	}
}

func TestConcurrentUnorderedAndPanics(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(strconv.FormatBool(ordered), func(t *testing.T) {
			r := newRig(t, spec, func(p *flow.Pipeline) {
				res := operators.Concurrent(p.Source(), func(_ context.Context, d *ports.Delivery) (string, error) {
					if string(d.Payload) == "1" {
						panic("boom")
					}
					return string(d.Payload), nil
				}, operators.ConcurrentOptions{Limit: 3, Ordered: ordered})
				flow.Sink(res, func(context.Context, string) error { return nil })
			})
			ds := msgs(10)
			r.f.push(ds...)
			r.f.waitSettled(t, 10)
			var pe *ports.PanicError
			if d := r.f.byID()[ds[1].ID][0]; d.Action != ports.Requeue || !errors.As(d.Reason, &pe) {
				t.Fatalf("panicking item settled %+v, want REQUEUE with a PanicError", d)
			}
		})
	}
}

func TestConcurrentOrderedCancellation(t *testing.T) {
	entered := make(chan struct{}, 2)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		res := operators.Concurrent(p.Source(), func(ctx context.Context, _ *ports.Delivery) (int, error) {
			entered <- struct{}{}
			<-ctx.Done()
			return 0, ctx.Err()
		}, operators.ConcurrentOptions{Limit: 2, Ordered: true})
		flow.Sink(res, func(context.Context, int) error { return nil })
	})
	r.f.push(msgs(6)...)
	waitN(t, entered, 2, "two calls in progress")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v after cancellation", s)
	}
}

func TestKeyOrderedSerialWithinKeyParallelAcross(t *testing.T) {
	const n = 300
	var mu sync.Mutex
	active := map[string]bool{}
	lastByKey := map[string]int{}
	var overlap, disorder atomic.Int32
	var parallel atomic.Int32
	var running atomic.Int32
	r := newRig(t, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 64}, func(p *flow.Pipeline) {
		res := operators.KeyOrdered(p.Source(), func(_ context.Context, d *ports.Delivery) (int, error) {
			if running.Add(1) > 1 {
				parallel.Add(1)
			}
			defer running.Add(-1)
			mu.Lock()
			if active[d.Key] {
				overlap.Add(1)
			}
			active[d.Key] = true
			mu.Unlock()
			i, _ := strconv.Atoi(string(d.Payload))
			for range 2000 { // a little work, so calls overlap
				_ = strconv.Itoa(i)
			}
			mu.Lock()
			active[d.Key] = false
			mu.Unlock()
			return i, nil
		}, operators.KeyOrderedOptions[*ports.Delivery]{Limit: 4})
		flow.Sink(res, func(ctx context.Context, i int) error {
			d := flow.DeliveryFrom(ctx)
			mu.Lock()
			defer mu.Unlock()
			if last, ok := lastByKey[d.Key]; ok && i < last {
				disorder.Add(1)
			}
			lastByKey[d.Key] = i
			return nil
		})
	})
	ds := make([]*ports.Delivery, n)
	for i := range ds {
		ds[i] = msg(strconv.Itoa(i), "k"+strconv.Itoa(i%5))
	}
	r.f.push(ds...)
	r.f.waitSettled(t, n)
	if overlap.Load() != 0 || disorder.Load() != 0 {
		t.Fatalf("%d overlapping calls within a key, %d out-of-order results within a key", overlap.Load(), disorder.Load())
	}
	if parallel.Load() == 0 {
		t.Log("no two keys ran at once (possible on a loaded machine); ordering still held")
	}
}

func TestKeyOrderedCancellationAndPanickingKey(t *testing.T) {
	entered := make(chan struct{}, 1)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		res := operators.KeyOrdered(p.Source(), func(ctx context.Context, _ *ports.Delivery) (int, error) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}, operators.KeyOrderedOptions[*ports.Delivery]{Limit: 2, Key: func(it flow.Item[*ports.Delivery]) string {
			if string(it.Value.Payload) == "boom" {
				panic("no key")
			}
			return "same"
		}})
		flow.Sink(res, func(context.Context, int) error { return nil })
	})
	bad := msg("boom", "")
	r.f.push(append(msgs(5), bad)...)
	recv(t, entered, "the first call")
	if d := r.f.waitSettled(t, 1)[0]; d.id != bad.ID || d.disp.Action != ports.Requeue {
		t.Fatalf("settled %+v, want the item whose key panicked requeued", d)
	}
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 1 {
		t.Fatalf("settled %v after cancellation; want only the panicking one", s)
	}
}
