package operators

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators/schedule"
	"github.com/sluicemq/sluice/ports"
)

// WindowOptions configure Window.
type WindowOptions[T any, K comparable] struct {
	// Size is the length of each window. Required.
	Size time.Duration
	// Slide is the distance between window starts: windows overlap when
	// Slide < Size (sliding windows) and an item belongs to every window
	// open at its arrival. Default Size (tumbling windows: each item in
	// exactly one).
	Slide time.Duration
	// Key returns the aggregation key of an item (a device id). Required.
	Key func(flow.Item[T]) K
	// FlushOnClose emits open windows at once when the input closes (the
	// pipeline is stopping), so their partial aggregates are handled
	// within the drain. Default false: windows still close at their end,
	// within the drain, and are cancelled (not settled, redelivered) if the
	// drain ends first — a partial aggregate is never written by default.
	FlushOnClose bool
}

// Pane is one window's aggregate for one key.
type Pane[K comparable, A any] struct {
	Key        K
	Start, End time.Time // [Start, End)
	Value      A         // the fold of every member's value, in arrival order
	Count      int       // members folded in
}

// Window aggregates items per key over time windows aligned to the clock
// (multiples of Slide since the zero time, so a one-minute window is a
// calendar minute): each item's value is folded into the pane of its key
// for every window open at its arrival (processing time), starting from
// A's zero value. When a window ends its panes are emitted, one per key.
//
// Settlement: an item's delivery is completed only when every pane it was
// folded into has completed (flow Split and Join): the IoT case — store a
// device's per-minute aggregate, and only then ack every reading in it.
// A pane's outcome completes all its members; an item in several sliding
// windows takes the most severe outcome of its panes. A panic in fold fails
// the item (fold must not panic; panes folded before the panic keep its
// contribution). On cancellation every held member is cancelled.
//
// Order: panes are emitted in window-end order; panes ending together in
// the order their keys were first seen.
//
// If Size <= 0, Slide < 0 or Key is nil, the pipeline's Start fails with an error wrapping
// ports.ErrInvalid.
func Window[T any, K comparable, A any](in flow.Stream[T], o WindowOptions[T, K], fold func(acc A, v T) A) flow.Stream[Pane[K, A]] {
	if o.Size <= 0 || o.Slide < 0 || o.Key == nil || fold == nil {
		return flow.Invalid[T, Pane[K, A]](in, invalid("Window", "WindowOptions", "Size must be positive, Slide not negative, Key and fold set"))
	}
	if o.Slide == 0 {
		o.Slide = o.Size
	}
	return flow.Operate(in, func(ctx context.Context, src <-chan flow.Item[T], out chan<- flow.Item[Pane[K, A]]) error {
		w := &windower[T, K, A]{o: o, fold: fold, ctx: ctx, out: out, panes: map[paneKey[K]]*pane[K, A]{}}
		w.run(src)
		return nil
	})
}

type paneKey[K comparable] struct {
	key   K
	start int64 // UnixNano
}

type pane[K comparable, A any] struct {
	Pane[K, A]
	members []*flow.Completion
}

type windower[T any, K comparable, A any] struct {
	o     WindowOptions[T, K]
	fold  func(A, T) A
	ctx   context.Context
	out   chan<- flow.Item[Pane[K, A]]
	panes map[paneKey[K]]*pane[K, A]
	ends  schedule.Heap[paneKey[K]] // one entry per open pane, by end
}

func (w *windower[T, K, A]) run(src <-chan flow.Item[T]) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var armed int64 = -1
	for {
		w.emitDue(time.Now().UnixNano())
		if src == nil && w.ends.Len() == 0 {
			return
		}
		var fire <-chan time.Time
		if e := w.ends.Peek(); e != nil {
			if e.When != armed {
				timer.Reset(time.Until(time.Unix(0, e.When)))
				armed = e.When
			}
			fire = timer.C
		}
		select {
		case it, ok := <-src:
			if !ok {
				src = nil
				if w.o.FlushOnClose {
					w.emitDue(1<<63 - 1)
				}
				continue
			}
			if !cancelled(it) {
				w.add(it)
			}
		case <-fire:
			armed = -1
		case <-w.ctx.Done():
			for _, e := range w.ends.Drain() {
				for _, c := range w.panes[e.Value].members {
					_ = c.Cancel(w.ctx.Err())
				}
			}
			if src != nil {
				cancelRest(src, w.ctx.Err())
			}
			return
		}
	}
}

// add folds it into the pane of its key in every window open now.
func (w *windower[T, K, A]) add(it flow.Item[T]) {
	key, err := callWindowKey(w.o.Key, it)
	if err != nil {
		_ = it.Completion.Fail(err)
		return
	}
	now := time.Now()
	var starts [8]int64
	ss := starts[:0]
	for s := now.Truncate(w.o.Slide); s.Add(w.o.Size).After(now); s = s.Add(-w.o.Slide) {
		ss = append(ss, s.UnixNano())
	}
	ps := make([]*pane[K, A], len(ss))
	for i, s := range ss {
		pk := paneKey[K]{key: key, start: s}
		p := w.panes[pk]
		if p == nil {
			start := time.Unix(0, s)
			p = &pane[K, A]{Pane: Pane[K, A]{Key: key, Start: start, End: start.Add(w.o.Size)}}
			w.panes[pk] = p
			w.ends.Push(p.End.UnixNano(), pk)
		}
		ps[i] = p
	}
	for _, p := range ps {
		acc, err := callFold(w.fold, p.Value, it.Value)
		if err != nil {
			_ = it.Completion.Fail(err)
			return
		}
		p.Value = acc
	}
	kids := []*flow.Completion{it.Completion}
	if len(ps) > 1 {
		kids = it.Completion.Split(len(ps))
	}
	for i, p := range ps {
		p.Count++
		p.members = append(p.members, kids[i])
	}
}

// emitDue emits every pane whose window ended at or before now.
func (w *windower[T, K, A]) emitDue(now int64) {
	for e := w.ends.Peek(); e != nil && e.When <= now; e = w.ends.Peek() {
		w.ends.Pop()
		p := w.panes[e.Value]
		delete(w.panes, e.Value)
		if p.Count == 0 {
			continue
		}
		w.out <- flow.Item[Pane[K, A]]{Ctx: w.ctx, Value: p.Pane, Completion: flow.Join(p.members...)}
	}
}

func callFold[T, A any](fold func(A, T) A, acc A, v T) (out A, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &ports.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fold(acc, v), nil
}

func callWindowKey[T any, K comparable](key func(flow.Item[T]) K, it flow.Item[T]) (k K, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &ports.PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return key(it), nil
}
