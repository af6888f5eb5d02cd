package flow

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// Stream is a typed stream of items inside one pipeline. Every stream has
// exactly one consumer: a stage that reads it or a terminal Sink.
type Stream[T any] struct {
	p  *Pipeline
	ch chan Item[T]
	// fz, when set, says the stream's producer is one goroutine that can
	// run its consumer inline: a consumer that runs one worker then sets
	// fz.push instead of reading ch, and the producer calls it (fusion).
	fz *fused[T]
	// fanOut names the stage before this stream that may make several
	// items of one delivery (FlatMap), "" when none does; an exactly-once
	// Sink refuses such a stream (exactlyonce.go).
	fanOut string
}

// fused is the inline consumer of a stream whose producer is a single
// goroutine (the source, or a one-worker stage itself inline or not).
// Calling the consumer where the item is produced, instead of handing it
// over a channel to a goroutine of its own, keeps every guarantee of a
// one-worker stage (one item at a time, in order, a panic fails the item,
// a cancelled item is cancelled, backpressure) and saves a goroutine
// hand-off per item and stage: on a loaded machine each hand-off is a
// wake-up that waits for a CPU.
type fused[T any] struct {
	push func(Item[T]) // the consumer's per-item body; nil: not fused
	end  func()        // called once after the last push (nil: nothing to do)
}

// send hands it to the stream's consumer: inline when fused, else over
// the channel (blocking while the consumer is busy: backpressure).
func (s Stream[T]) send(it Item[T]) {
	if s.fz != nil && s.fz.push != nil {
		s.fz.push(it)
		return
	}
	s.ch <- it
}

// finish ends the stream after the producer's last send.
func (s Stream[T]) finish() {
	if s.fz != nil && s.fz.push != nil {
		if s.fz.end != nil {
			s.fz.end()
		}
		return
	}
	close(s.ch)
}

// fuse attaches body as the inline consumer of s when s's producer can
// run it and the stage runs one worker; it reports whether it did.
func (s Stream[T]) fuse(workers int, body func(Item[T]), end func()) bool {
	if s.fz == nil || workers != 1 {
		return false
	}
	s.fz.push, s.fz.end = body, end
	return true
}

// Pipeline returns the pipeline the stream belongs to.
func (s Stream[T]) Pipeline() *Pipeline { return s.p }

// StageOption configures a stage.
type StageOption func(*stageConfig)

type stageConfig struct {
	workers     int
	buffer      int
	bufferSet   bool // Buffer was given: the caller wants the channel
	exactlyOnce bool // ExactlyOnceEffect was given (exactlyonce.go)
	valuesOnly  bool // ValuesOnly was given (Gather)
}

// ValuesOnly is a promise by a Gather stage's gatherer that lets the
// pipeline keep its fast path: the gatherer reads an item's delivery
// (Item.Msg) only while it holds the item, emits values made of the items'
// values only (no delivery, no item, no member's completion), and does not
// touch a member's completion after completing it or handing it to
// flow.Join or Completion.Derive. A pipeline whose stages hand their
// functions no delivery recycles its deliveries once settled and may
// leave their headers in the broker's records until asked for (see
// docs/settlement.md); every Gather stage without this option, like Via,
// Operate and a Sink of deliveries, turns that off for its pipeline.
// operators.Batch gives it with BatchOptions.ValuesOnly. A stream whose
// values are deliveries is handed out all the same. Other stages ignore
// it. Breaking the promise hands the gatherer deliveries and
// completions that already belong to later messages.
func ValuesOnly() StageOption {
	return func(c *stageConfig) { c.valuesOnly = true }
}

// Workers runs a stage's function on n goroutines (default 1; a Sink
// without it takes its pipeline's profile's count, see WithProfile). Order
// across items is then not kept. With one worker, order is kept, and the
// stage may run on the goroutine of the stage before it (see Buffer).
func Workers(n int) StageOption {
	return func(c *stageConfig) {
		if n > 0 {
			c.workers = n
		}
	}
}

// Buffer sets the capacity of a stage's output channel (default 16).
//
// A stage that runs one worker (the default) after the source or after
// another one-worker stage is run inline on its upstream's goroutine, with
// no channel in between; Buffer on the upstream stage keeps the channel
// (and the goroutine of the stage after it), to decouple the two.
func Buffer(n int) StageOption {
	return func(c *stageConfig) {
		if n >= 0 {
			c.buffer = n
			c.bufferSet = true
		}
	}
}

func stageOptions(opts []StageOption) stageConfig {
	c := stageConfig{workers: 1, buffer: 16}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// take marks s consumed and returns its channel.
func (s Stream[T]) take() <-chan Item[T] {
	if s.p == nil {
		panic("flow: zero Stream; streams come from Pipeline.Source and stages")
	}
	s.p.mu.Lock()
	started := s.p.started || s.p.ended
	s.p.mu.Unlock()
	if started {
		// Too late to be part of this pipeline: fail it loudly rather
		// than leave a stage that never runs.
		err := errors.New("flow: stage added after Start: build every stage (and Sink) before Start or Run")
		s.p.report(err)
		s.p.fail(err)
	}
	s.p.open--
	return s.ch
}

func newStream[T any](p *Pipeline, buffer int) Stream[T] {
	p.open++
	return Stream[T]{p: p, ch: make(chan Item[T], buffer)}
}

// spawn registers a goroutine body started by Start.
func (p *Pipeline) spawn(run func()) { p.runs = append(p.runs, run) }

// atStart registers f, called by Start once the items' parent context
// (workCtx) exists and before any stage goroutine runs.
func (p *Pipeline) atStart(f func()) { p.inits = append(p.inits, f) }

// workers runs body on n goroutines and then calls after once.
func (p *Pipeline) workers(n int, body func(), after func()) {
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		p.spawn(func() {
			defer wg.Done()
			body()
		})
	}
	if after != nil {
		p.spawn(func() { wg.Wait(); after() })
	}
}

// Emit sends an item downstream, blocking while downstream is busy
// (backpressure). Downstream reads until its input is closed, so an emit
// always completes.
type Emit[T any] func(Item[T])

// Via is the general item-level stage: fn is called for every item of in
// and owns it — it must pass it on through emit, derive items from it
// (Completion.Split), or complete it. A panic in fn fails the item (if fn
// had not completed or emitted it) with a *ports.PanicError. fn calls emit
// before it returns, from its own goroutine (the stage after it may run
// inline in emit).
func Via[In, Out any](in Stream[In], fn func(it Item[In], emit Emit[Out]), opts ...StageOption) Stream[Out] {
	in.expose()
	return via(in, fn, opts...)
}

// via is Via for flow's own stages, which hand their functions values
// only: they leave the pipeline's recycling alone (see exposed).
func via[In, Out any](in Stream[In], fn func(it Item[In], emit Emit[Out]), opts ...StageOption) Stream[Out] {
	cfg := stageOptions(opts)
	src := in.take()
	out := newStream[Out](in.p, cfg.buffer)
	out.fanOut = in.fanOut
	if cfg.workers == 1 && !cfg.bufferSet {
		out.fz = &fused[Out]{} // one goroutine produces out: its consumer may run inline
	}
	p := in.p
	emit := out.send
	body := func(it Item[In]) {
		if err := it.Ctx.Err(); err != nil {
			_ = it.Completion.Cancel(err)
			return
		}
		callVia(p, fn, it, emit)
	}
	if in.fuse(cfg.workers, body, out.finish) {
		return out
	}
	p.workers(cfg.workers, func() {
		for it := range src {
			body(it)
		}
	}, out.finish)
	return out
}

func callVia[In, Out any](p *Pipeline, fn func(Item[In], Emit[Out]), it Item[In], emit Emit[Out]) {
	defer func() {
		if v := recover(); v != nil {
			// If fn already completed or handed on the item this reports
			// a conflict instead of settling twice.
			_ = it.Completion.Fail(p.panicked(v, debug.Stack()))
		}
	}()
	fn(it, emit)
}

// Operate registers a custom operator with a loop of its own (batching,
// windows, timers). run reads in until it is closed and sends items to
// out; it owns every item it reads and must forward or complete each one,
// also when ctx is cancelled (cancel what it still holds). out is closed
// after run returns. A returned error or a panic is fatal: the pipeline
// stops and the items run held stay unsettled (redelivered).
func Operate[In, Out any](in Stream[In], run func(ctx context.Context, in <-chan Item[In], out chan<- Item[Out]) error, opts ...StageOption) Stream[Out] {
	in.expose()
	cfg := stageOptions(opts)
	src := in.take()
	out := newStream[Out](in.p, cfg.buffer)
	out.fanOut = in.fanOut
	p := in.p
	p.spawn(func() {
		defer close(out.ch)
		err := func() (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = p.panicked(v, debug.Stack())
				}
			}()
			return run(p.workCtx, src, out.ch)
		}()
		if err != nil {
			p.fail(err)
			for it := range src { // keep upstream flowing until it closes
				_ = it.Completion.Cancel(err)
			}
		}
	})
	return out
}

// Sink is the terminal stage: fn handles each value, and its result
// completes the item — nil succeeds (ACK), poison dead-letters, another
// error requeues, a cancellation of the item's context settles nothing.
// A panic in fn fails the item with a *ports.PanicError.
func Sink[T any](in Stream[T], fn func(ctx context.Context, v T) error, opts ...StageOption) {
	in.exposeDelivery()
	src := in.take()
	cfg := in.p.sinkOptions(opts) // profile.go: a profile's worker count
	p := in.p
	p.terminal(in.fanOut, cfg.exactlyOnce) // exactlyonce.go
	if cfg.exactlyOnce {
		in.expose() // an exactly-once effect records the delivery's identity
	}
	body := func(it Item[T]) {
		if err := it.Ctx.Err(); err != nil {
			_ = it.Completion.Cancel(err)
			return
		}
		_ = it.Settle(callSink(p, fn, it.Ctx, it.Value))
	}
	runTerminal(in, src, cfg.workers, body)
}

// runTerminal runs a terminal stage's body on every item of in (whose
// channel, src, it took): inline on its upstream's goroutine where it
// can, else on workers goroutines.
func runTerminal[T any](in Stream[T], src <-chan Item[T], workers int, body func(Item[T])) {
	if in.fuse(workers, body, nil) {
		return
	}
	in.p.workers(workers, func() {
		for it := range src {
			body(it)
		}
	}, nil)
}

func callSink[T any](p *Pipeline, fn func(context.Context, T) error, ctx context.Context, v T) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = p.panicked(r, debug.Stack())
		}
	}()
	return fn(ctx, v)
}

// panicked turns a recovered panic into a *ports.PanicError, logs it once
// at Error level with its stack (the stack stays out of message headers:
// the dead-letter reason carries only the panic value), and hands it to
// the error handler when one is set.
func (p *Pipeline) panicked(v any, stack []byte) *ports.PanicError {
	pe := &ports.PanicError{Value: v, Stack: stack}
	p.stats.errors.Add(1)
	p.cfg.logger.Error("sluice: handler panicked", "panic", fmt.Sprint(v), "topic", string(p.spec.Topic), "adapter", p.adapterName(), "stack", string(stack))
	if p.cfg.onError != nil {
		p.cfg.onError(pe)
	}
	return pe
}

// Invalid stands in for a stage whose options are invalid: it records err
// as the pipeline's build error (Start returns it), consumes in, and
// returns a stream that never carries anything, so construction can go on
// and report the first error at Start instead of panicking.
func Invalid[In, Out any](in Stream[In], err error) Stream[Out] {
	in.take()
	in.p.buildFail(err)
	return newStream[Out](in.p, 0)
}

// expose marks in's pipeline as handing items (and with them deliveries
// and completions) to user code: it recycles nothing (see recycle).
func (s Stream[T]) expose() {
	if s.p != nil {
		s.p.exposed = true
	}
}

// exposeDelivery is expose for a stage whose function gets in's values,
// when those are deliveries.
func (s Stream[T]) exposeDelivery() {
	if _, ok := any((*T)(nil)).(**ports.Delivery); ok {
		s.expose()
	}
}
