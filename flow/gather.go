package flow

import (
	"context"
	"runtime/debug"
)

// Gatherer is the running state of a Gather stage: it takes the stage's
// items one at a time and emits what it makes of them.
type Gatherer[In any] interface {
	// Push takes one item, which it owns (see Item): it holds it, emits
	// something made of it, or completes it. Pushes never overlap and
	// come in the input's order.
	Push(it Item[In])
	// Close is called once, after the last Push, when the input ends
	// (the pipeline stops receiving): flush what is held (it is handled
	// within the drain) or cancel it. Emit must not be called after
	// Close returns.
	Close()
}

// Gather is the stage for operators that hold items and emit what they
// make of them later (batches, windows), without a goroutine of their
// own between them and their upstream: where Operate reads a channel on
// a loop of its own, so that every item crosses a goroutine hand-off,
// Gather pushes each item into the operator on the goroutine that
// produced it when in has one producer (the source, or a one-worker
// stage; see Buffer), and only what the operator emits crosses over to
// the next stage. When in has several producers (Workers, Buffer) the
// items are pushed from a goroutine of the stage's own, still one at a
// time.
//
// start is called once, when the pipeline starts and before the first
// Push, with the items' parent context (cancelled when the pipeline
// cancels its in-flight work: the gatherer then cancels what it holds and
// every item pushed afterwards) and emit, the stage's output. emit sends
// over a channel (Buffer sets its capacity, default 16; of the stage
// options only Buffer and ValuesOnly apply) to the next stage, which runs
// on goroutines of its own; it blocks while that stage is busy
// (backpressure) and always completes, since the next stage reads until
// Close has returned. emit may be called from any goroutine (a timer's),
// by one goroutine at a time: the gatherer serializes its emits and its
// pushes itself (a mutex), so that downstream sees them in order.
//
// An item whose context is done is cancelled instead of being pushed. A
// panic in Push or Close is fatal, as an error of an Operate loop: the
// pipeline stops, the items the gatherer held stay unsettled
// (redelivered), and the items that arrive afterwards are cancelled.
func Gather[In, Out any](in Stream[In], start func(ctx context.Context, emit Emit[Out]) Gatherer[In], opts ...StageOption) Stream[Out] {
	cfg := stageOptions(opts)
	if cfg.valuesOnly {
		in.exposeDelivery() // values that are deliveries are handed out all the same
	} else {
		in.expose()
	}
	src := in.take()
	out := newStream[Out](in.p, cfg.buffer)
	out.fanOut = in.fanOut
	p := in.p
	var (
		g      Gatherer[In]
		broken error // a panic in Push or Close: the stage gave up
	)
	p.atStart(func() {
		g = start(p.workCtx, func(it Item[Out]) { out.ch <- it })
	})
	// fatal, deferred around Push and Close, turns a panic into the
	// pipeline's fatal error; the stage then cancels what arrives.
	fatal := func() {
		if v := recover(); v != nil {
			broken = p.panicked(v, debug.Stack())
			p.fail(broken)
		}
	}
	push := func(it Item[In]) {
		if broken != nil {
			_ = it.Completion.Cancel(broken)
			return
		}
		if err := it.Ctx.Err(); err != nil {
			_ = it.Completion.Cancel(err)
			return
		}
		defer fatal()
		g.Push(it)
	}
	closeOut := func() {
		defer close(out.ch)
		if broken == nil {
			defer fatal()
			g.Close()
		}
	}
	if in.fuse(1, push, closeOut) {
		return out
	}
	p.spawn(func() {
		for it := range src {
			push(it)
		}
		closeOut()
	})
	return out
}
