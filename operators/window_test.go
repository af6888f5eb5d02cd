package operators_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

func byMsgKey(it flow.Item[*ports.Delivery]) string { return it.Msg.Key }

func sum(acc int, d *ports.Delivery) int {
	n, _ := strconv.Atoi(string(d.Payload))
	return acc + n
}

func TestTumblingWindowAcksMembersOnlyAfterPaneCompleted(t *testing.T) {
	panes := make(chan operators.Pane[string, int], 8)
	release := make(chan struct{})
	r := newRig(t, spec, func(p *flow.Pipeline) {
		w := operators.Window(p.Source(), operators.WindowOptions[*ports.Delivery, string]{Size: 50 * time.Millisecond, Key: byMsgKey}, sum)
		flow.Sink(w, func(_ context.Context, pn operators.Pane[string, int]) error {
			panes <- pn
			<-release // "store the aggregate"
			return nil
		})
	})
	r.f.push(msg("1", "dev-a"), msg("2", "dev-a"), msg("10", "dev-b"))
	total := map[string]int{}
	add := func(pn operators.Pane[string, int]) {
		total[pn.Key] += pn.Value
		if pn.End.Sub(pn.Start) != 50*time.Millisecond {
			t.Fatalf("pane %v spans %v, want 50ms", pn.Key, pn.End.Sub(pn.Start))
		}
	}
	add(recv(t, panes, "a pane"))
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v before the pane's result completed", s)
	}
	close(release)
	r.f.waitSettled(t, 3)
	for len(panes) > 0 { // the items may straddle a window boundary: sums add up per key
		add(<-panes)
	}
	if total["dev-a"] != 3 || total["dev-b"] != 10 {
		t.Fatalf("sums %v, want dev-a 3 and dev-b 10", total)
	}
	for _, s := range r.f.settlements() {
		if s.disp.Action != ports.Ack {
			t.Fatalf("settled %v, want ACK", s.disp.Action)
		}
	}
}

func TestSlidingWindowInputCompletesAfterAllItsPanes(t *testing.T) {
	var mu sync.Mutex
	var seen []operators.Pane[string, int]
	fail := true
	r := newRig(t, spec, func(p *flow.Pipeline) {
		w := operators.Window(p.Source(), operators.WindowOptions[*ports.Delivery, string]{Size: 40 * time.Millisecond, Slide: 20 * time.Millisecond, Key: byMsgKey}, sum)
		flow.Sink(w, func(_ context.Context, pn operators.Pane[string, int]) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, pn)
			if fail { // the first pane fails: every member of it is requeued, even though its other pane succeeds
				fail = false
				return errTransient
			}
			return nil
		})
	})
	r.f.push(msg("5", "k"))
	s := r.f.waitSettled(t, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("%d panes, want the item in 2 sliding windows", len(seen))
	}
	if s[0].disp.Action != ports.Requeue {
		t.Fatalf("settled %v, want REQUEUE (most severe of its panes)", s[0].disp.Action)
	}
}

func TestWindowCancelHeldMembersOnStop(t *testing.T) {
	seen := make(chan struct{}, 4)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		w := operators.Window(tap(p.Source(), seen), operators.WindowOptions[*ports.Delivery, string]{Size: time.Hour, Key: byMsgKey}, sum)
		flow.Sink(w, func(context.Context, operators.Pane[string, int]) error { t.Error("pane emitted"); return nil })
	})
	r.f.push(msgs(4)...)
	waitN(t, seen, 4, "items reaching the window")
	r.stop(t, false)
	if s := r.f.settlements(); len(s) != 0 {
		t.Fatalf("settled %v: an unfinished window must settle nothing", s)
	}
}

func TestWindowFlushOnClose(t *testing.T) {
	seen := make(chan struct{}, 2)
	panes := make(chan int, 2)
	r := newRig(t, spec, func(p *flow.Pipeline) {
		w := operators.Window(tap(p.Source(), seen), operators.WindowOptions[*ports.Delivery, string]{Size: time.Hour, Key: byMsgKey, FlushOnClose: true}, sum)
		flow.Sink(w, func(_ context.Context, pn operators.Pane[string, int]) error { panes <- pn.Count; return nil })
	})
	r.f.push(msg("1", "x"), msg("2", "x"))
	waitN(t, seen, 2, "items reaching the window")
	r.stop(t, true)
	if s := r.f.settlements(); len(s) != 2 || len(panes) != 1 || <-panes != 2 {
		t.Fatalf("settled %d with %d panes; want the partial pane of 2 flushed and both acked", len(s), len(panes))
	}
}

func TestWindowFoldPanicFailsItem(t *testing.T) {
	r := newRig(t, spec, func(p *flow.Pipeline) {
		w := operators.Window(p.Source(), operators.WindowOptions[*ports.Delivery, string]{Size: 10 * time.Millisecond, Key: byMsgKey},
			func(acc int, d *ports.Delivery) int {
				if string(d.Payload) == "boom" {
					panic("bad fold")
				}
				return acc + 1
			})
		flow.Sink(w, func(context.Context, operators.Pane[string, int]) error { return nil })
	})
	bad, good := msg("boom", "k"), msg("1", "k")
	r.f.push(bad, good)
	r.f.waitSettled(t, 2)
	var pe *ports.PanicError
	got := r.f.byID()
	if d := got[bad.ID][0]; d.Action != ports.Requeue || !errors.As(d.Reason, &pe) {
		t.Fatalf("panicking item settled %+v, want REQUEUE with a PanicError", d)
	}
	if d := got[good.ID][0]; d.Action != ports.Ack {
		t.Fatalf("good item settled %v, want ACK", d.Action)
	}
}
