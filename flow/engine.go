package flow

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// engine is a pipeline's settlement engine. Completions are handed to it
// (enqueue never blocks and does no broker I/O); it coalesces them into
// rounds and carries each round out with as few Subscription.Settle calls
// as the dispositions allow: every ACK of a round in one call, and each
// batch (a flow.Join) with a shared disposition in one call. Several calls
// may run at once (settleConcurrency), each on a goroutine of its own,
// except the ACK call of an adapter that defers its acknowledgements
// (ports.Flusher), which runs on the engine's goroutine; the in-flight slot
// of a delivery is released only when its call returned.
//
// The calls run on settle workers that the engine starts as it needs them,
// up to settleConcurrency, and that live until it closes: a call costs no
// goroutine start and no allocation of its own. A worker whose call was the
// only one running carries out the ACK round that gathered meanwhile
// itself (takeOver): a busy pipeline's rounds then cost no goroutine
// hand-off between the engine and its workers.
//
// When the in-flight window is full, the receive loop has nothing to do
// but wait for slots; if the pending round holds ACKs only and would go
// now (see gathering), the receive loop carries it out itself
// (settleHere): a full window then costs no hand-off to the engine and
// back, which on a busy machine means waiting for a processor twice.
//
// A round is flushed at once when no Settle call is running; while one is,
// completions gather until it returns, and the round goes then — or
// earlier, on another call, when it holds maxBatch deliveries, when no
// delivery is being handled any more (nothing else is coming soon), when
// its oldest completion has waited linger, or when the pipeline stops.
// Rounds so grow with the broker's round trip, and an idle pipeline adds
// no delay at all.
type engine struct {
	p           *Pipeline
	sub         ports.Subscription
	linger      time.Duration
	maxBatch    int
	settleTime  time.Duration
	concurrency chan struct{} // a token per running Settle call
	// inlineAcks: the subscription defers its acknowledgements
	// (ports.Flusher), so an ACK round's Settle records or writes them
	// without waiting for the broker, and runs on the engine's own
	// goroutine: starting a goroutine per call cost more than such a call
	// (measured with go run ./tck/bench -cpuprofile; see docs/benchmarks.md).
	inlineAcks bool
	// carries: inlineAcks, and the subscription's receive sends the ACKs
	// recorded ahead of its read (ports.AckCarrier): the receive loop
	// settles the deliveries it handled before its next receive (loopDone),
	// and completions made meanwhile (onLoop) do not wake the engine.
	carries bool
	onLoop  atomic.Bool
	// ackCall holds an inlineAcks ACK call: the engine's and the receive
	// loop's (settleHere) never overlap, as ports.Flusher promises.
	ackCall sync.Mutex

	// active counts deliveries handed to the pipeline and not yet
	// completed; when it drops to zero the pending round is flushed.
	active atomic.Int64
	// running counts Settle calls in progress; while none is, a pending
	// round is flushed at once.
	running atomic.Int64

	mu      sync.Mutex
	acks    []*root // pending ACKs, settled together
	ackEnds []int   // where each enqueue's ACKs end in acks (for splitting)
	groups  []group // pending other dispositions, one call each
	n       int     // deliveries pending in acks and groups
	since   time.Time
	closing bool

	// spare holds the buffers of finished ACK rounds for the next rounds,
	// so that a busy pipeline does not grow a new slice for every round.
	spare chan *ackBuf
	// round is the group slice of the last flushed round, emptied, for
	// the round after the next (flush swaps it with groups; run only).
	round []group

	// work hands a group to an idle settle worker; workers counts those
	// started (run only). run closes work when it returns, and the
	// workers exit.
	work     chan group
	workers  int
	workerWG sync.WaitGroup

	wake  chan struct{} // capacity 1: something to look at
	quit  chan struct{} // closed by close: flush what is pending, then exit
	exit  chan struct{} // closed when the loop has returned
	calls sync.WaitGroup
}

// ackBuf is the buffers of one ACK round: its members, where each
// completion's members end, and the Settle argument.
type ackBuf struct {
	rs   []*root
	ends []int
	ds   []*ports.Delivery
}

// group is deliveries settled together with one disposition.
type group struct {
	rs   []*root
	disp ports.Disposition
	// buf, for a coalesced ACK round, holds rs and ends; the call gives it
	// back to the engine when done.
	buf *ackBuf
	// ends, for a coalesced ACK round, is where each completion's (or
	// batch's) members end in rs: when the round's Settle call fails, the
	// parts are settled again one by one, so that one delivery the
	// adapter cannot settle (from a lost channel, a revoked partition)
	// does not leave the others of the round unsettled.
	ends []int
}

func newEngine(p *Pipeline, sub ports.Subscription) *engine {
	c := p.cfg.settle
	e := &engine{
		p:           p,
		sub:         sub,
		linger:      c.linger,
		maxBatch:    c.maxBatch,
		settleTime:  p.cfg.settleTime,
		concurrency: make(chan struct{}, c.concurrency),
		spare:       make(chan *ackBuf, c.concurrency+1),
		work:        make(chan group),
		wake:        make(chan struct{}, 1),
		quit:        make(chan struct{}),
		exit:        make(chan struct{}),
	}
	if e.maxBatch <= 0 {
		e.maxBatch = max(1, p.spec.InFlight/2)
	}
	_, e.inlineAcks = sub.(ports.Flusher)
	carrier, ok := sub.(ports.AckCarrier)
	e.carries = e.inlineAcks && ok && carrier.CarriesAcks()
	return e
}

// handed records n deliveries entering the pipeline.
func (e *engine) handed(n int64) { e.active.Add(n) }

// enqueue takes over the settlement of rs, all with disp. It never blocks
// on the adapter. It returns false, taking nothing, once the engine is
// closing: the caller reports those completions as late.
func (e *engine) enqueue(rs []*root, disp ports.Disposition) bool {
	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		return false
	}
	if e.n == 0 {
		e.since = time.Now()
	}
	if disp.Action == ports.Ack {
		e.acks = append(e.acks, rs...)
		e.ackEnds = append(e.ackEnds, len(e.acks))
	} else {
		e.groups = append(e.groups, group{rs: append([]*root(nil), rs...), disp: disp})
	}
	e.n += len(rs)
	first := e.n == len(rs)
	full := e.n >= e.maxBatch
	e.mu.Unlock()
	idle := e.active.Add(-int64(len(rs))) == 0
	if (first || full || idle) && !e.onLoop.Load() {
		e.poke()
	}
	return true
}

// loopStart and loopDone bracket the receive loop's hand-on of one
// receive's deliveries on a subscription that carries its ACKs: what
// completes meanwhile (all of it, when the pipeline's stages run on the
// loop) gathers without waking the engine, and the loop settles it once
// it handed the last delivery on, so that its next receive sends those
// ACKs ahead of its read and gets their slots — the raw client's one round
// trip per window, without a hand-off to the engine and back, which on a
// busy machine waits for a processor each way. A round the loop cannot
// take (an ACK call under way, requeues pending) goes to the engine.
func (e *engine) loopStart() {
	if e.carries {
		e.onLoop.Store(true)
	}
}

func (e *engine) loopDone() {
	if !e.carries {
		return
	}
	e.onLoop.Store(false) // before settleOnLoop locks e.mu: a completion after that pokes
	if !e.settleOnLoop(false) && e.pending() {
		e.poke()
	}
}

// done records completions that need no settlement (cancelled, late).
func (e *engine) done(n int) {
	if e.active.Add(-int64(n)) == 0 {
		e.poke()
	}
}

func (e *engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// run is the engine's loop; it returns after close once everything pending
// was handed to a Settle call.
func (e *engine) run() {
	defer close(e.exit)
	defer close(e.work) // after the last flush: the workers exit
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	for {
		select {
		case <-e.wake:
		case <-timer.C:
			armed = false
		case <-e.quit:
		}
		e.mu.Lock()
		n, closing := e.n, e.closing
		wait, gather := e.gathering()
		e.mu.Unlock()
		if gather {
			if !armed {
				timer.Reset(wait)
				armed = true
			}
			continue
		}
		if armed {
			timer.Stop() // Go ≥1.23: no stale tick is delivered after Stop
			armed = false
		}
		if n > 0 {
			e.flush()
		}
		if closing {
			return
		}
	}
}

// gathering reports whether the pending round waits for more, and for how
// long at most (e.mu held): only while a Settle call is running (so the
// round grows with the broker's round trip instead of adding latency when
// the adapter is idle), deliveries are still being handled, the round is
// below its size and its oldest member is younger than the linger.
func (e *engine) gathering() (time.Duration, bool) {
	wait := e.linger - time.Since(e.since)
	return wait, e.n > 0 && !e.closing && e.n < e.maxBatch && e.active.Load() > 0 && e.running.Load() > 0 && wait > 0
}

// flush takes the pending round and starts its Settle calls. It waits for
// a free call token first, so that while every token is busy completions
// keep coalescing into the next round.
func (e *engine) flush() {
	e.concurrency <- struct{}{}
	next := e.takeSpare()
	e.mu.Lock()
	acks, ends, groups := e.acks, e.ackEnds, e.groups
	e.acks, e.ackEnds, e.groups, e.n = next.rs, next.ends, e.round[:0], 0
	e.mu.Unlock()
	if len(acks) > 0 {
		next.rs, next.ends = acks, ends
		groups = append(groups, group{rs: acks, disp: ports.Disposition{Action: ports.Ack}, ends: ends, buf: next})
	} else {
		// Nothing acked this round: the buffers taken over stay empty;
		// give back the spare's own ones.
		next.rs, next.ends = acks, ends
		e.putSpare(next)
	}
	for i, g := range groups {
		if i > 0 {
			e.concurrency <- struct{}{}
		}
		e.calls.Add(1)
		e.running.Add(1)
		if e.inlineAcks && g.disp.Action == ports.Ack {
			// The ACK group is the round's last: the requeues and dead
			// letters above go on their own goroutines meanwhile.
			e.ackCall.Lock()
			e.call(g)
			e.ackCall.Unlock()
			continue
		}
		e.dispatch(g)
	}
	if len(groups) == 0 {
		<-e.concurrency
	}
	// Each call got its group by value: the slice is the next round's.
	clear(groups)
	e.round = groups[:0]
}

// dispatch runs g on a settle worker: an idle one, or a new one while fewer
// than the concurrency limit were started. The caller holds a call token,
// so at most limit-1 other calls run: with every worker started, one is
// idle or about to be, and the send waits only for it to come back.
func (e *engine) dispatch(g group) {
	if e.workers < cap(e.concurrency) {
		select {
		case e.work <- g:
			return
		default:
		}
		e.workers++
		e.workerWG.Add(1)
		go e.worker(g)
		return
	}
	e.work <- g
}

// worker carries out g, then the groups handed to it, until run closes
// work. After each call it takes over the round that gathered meanwhile
// when that round would go at once (see takeOver), keeping its call token,
// so that a busy pipeline's rounds follow each other on one worker without
// waking the engine and being handed back over work.
func (e *engine) worker(g group) {
	defer e.workerWG.Done()
	for ok := true; ok; g, ok = <-e.work {
		e.carry(g)
		for {
			next, more := e.takeOver()
			if !more {
				break
			}
			e.carry(next)
		}
		e.finished()
	}
}

// call carries out one group on the calling goroutine (the engine's, for
// the ACKs of a ports.Flusher, or the receive loop's in settleHere) and
// gives its call token back.
func (e *engine) call(g group) {
	e.carry(g)
	e.finished()
}

// finished ends a call: the round that waited for it goes now, and the
// call's token is given back.
func (e *engine) finished() {
	e.running.Add(-1)
	// A round that waited for this call goes now. On a carrier the call
	// is mostly the receive loop's own, and an engine woken for nothing
	// would only compete with the loop for a processor.
	if !e.carries || e.pending() {
		e.poke()
	}
	<-e.concurrency
	e.calls.Done()
}

// pending reports whether completions wait for a round.
func (e *engine) pending() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n > 0
}

// takeOver returns the pending round, taking it from the engine, when a
// worker has just finished the only running call and the round holds ACKs
// only: the engine would flush it at once (no call running), on a worker.
// The worker carries it out itself, under the token, call count and
// running count of the call it finished, so that nothing changes for the
// engine's accounting but two goroutine hand-offs (engine wake-up, work
// send) are saved per round. A round with other dispositions, or the ACKs
// of a ports.Flusher (which go on the engine's goroutine), is left to the
// engine.
func (e *engine) takeOver() (group, bool) {
	if e.inlineAcks || e.running.Load() != 1 {
		return group{}, false
	}
	return e.takeAcks(false)
}

// settleHere is called by the receive loop when its window is full: if
// the pending round holds ACKs only and would go now (it is not gathering
// more) and a call token is free, it carries the round out on the calling
// goroutine, as the engine would on a worker, and reports true (slots were
// released). It counts the call and, for a ports.Flusher, holds ackCall,
// like any other call.
func (e *engine) settleHere() bool { return e.settleOnLoop(true) }

// settleAhead is settleHere before a receive whose window is not full
// (Pipeline.settleAhead): it does not wait for an ACK call under way.
func (e *engine) settleAhead() { e.settleOnLoop(false) }

// settleOnLoop is settleHere, waiting for an ACK call under way when wait
// is true.
func (e *engine) settleOnLoop(wait bool) bool {
	select {
	case e.concurrency <- struct{}{}:
	default:
		return false
	}
	if e.inlineAcks {
		if wait {
			e.ackCall.Lock()
		} else if !e.ackCall.TryLock() {
			<-e.concurrency
			return false
		}
		defer e.ackCall.Unlock()
	}
	g, ok := e.takeAcks(true)
	if !ok {
		<-e.concurrency
		return false
	}
	e.running.Add(1)
	e.call(g)
	return true
}

// takeAcks takes the pending round when it holds ACKs only. A new call
// (settleHere) is counted under the lock, and refused while the round is
// gathering or once the engine is closing (so that close waits for it).
func (e *engine) takeAcks(newCall bool) (group, bool) {
	next := e.takeSpare()
	e.mu.Lock()
	refuse := e.n == 0 || len(e.groups) > 0
	if !refuse && newCall {
		_, gather := e.gathering()
		refuse = e.closing || gather
	}
	if refuse {
		e.mu.Unlock()
		e.putSpare(next)
		return group{}, false
	}
	if newCall {
		e.calls.Add(1)
	}
	acks, ends := e.acks, e.ackEnds
	e.acks, e.ackEnds, e.n = next.rs, next.ends, 0
	e.mu.Unlock()
	next.rs, next.ends = acks, ends
	return group{rs: acks, disp: ports.Disposition{Action: ports.Ack}, ends: ends, buf: next}, true
}

// carry carries out one group and accounts for each of its deliveries.
func (e *engine) carry(g group) {
	p := e.p
	var ds []*ports.Delivery
	if g.buf != nil && cap(g.buf.ds) >= len(g.rs) {
		ds = g.buf.ds[:len(g.rs)]
	} else {
		ds = make([]*ports.Delivery, len(g.rs))
	}
	for i, r := range g.rs {
		ds[i] = r.one[0]
	}
	if g.buf != nil {
		g.buf.ds = ds
	}
	if len(ds) == 1 {
		ds = g.rs[0].one[:]
	}
	err := e.settle(ds, g.disp)
	if err != nil && len(g.ends) > 1 {
		// The round coalesced independent completions: settle each part
		// on its own, as if they had never shared a call.
		start := 0
		for _, end := range g.ends {
			part := ds[start:end]
			perr := e.settle(part, g.disp)
			p.settledAll(g.rs[start:end], g.disp, perr)
			start = end
		}
	} else {
		p.settledAll(g.rs, g.disp, err)
		if err == nil && g.disp.Action == ports.Ack && p.recycler != nil {
			p.recycle(g.rs, ds)
		}
	}
	n := len(g.rs)
	if g.buf != nil {
		e.putSpare(g.buf)
	}
	p.stats.inFlight.Add(-int64(n))
	p.slots.release(n)
}

// takeSpare returns an empty ACK buffer: a finished round's, or a new one.
func (e *engine) takeSpare() *ackBuf {
	select {
	case b := <-e.spare:
		return b
	default:
		return &ackBuf{}
	}
}

// putSpare keeps b for a later round (its roots and deliveries cleared, so
// that settled deliveries are not kept alive by it), or drops it.
func (e *engine) putSpare(b *ackBuf) {
	clear(b.rs)
	clear(b.ds)
	b.rs, b.ends, b.ds = b.rs[:0], b.ends[:0], b.ds[:0]
	select {
	case e.spare <- b:
	default:
	}
}

// settle is one call to the adapter's Settle.
func (e *engine) settle(ds []*ports.Delivery, disp ports.Disposition) error {
	p := e.p
	p.stats.settleCalls.Add(1)
	if e.settleTime > 0 {
		ctx, cancel := context.WithTimeout(p.settleC, e.settleTime)
		defer cancel()
		return e.sub.Settle(ctx, ds, disp)
	}
	return e.sub.Settle(p.settleC, ds, disp)
}

// close flushes what is pending and waits until every Settle call it
// started has returned, or ctx is done. Completions enqueued after close
// are not settled by it; the pipeline refuses them before (closed).
func (e *engine) close(ctx context.Context) error {
	e.mu.Lock()
	if !e.closing {
		e.closing = true
		close(e.quit)
	}
	e.mu.Unlock()
	idle := make(chan struct{})
	go func() {
		<-e.exit
		e.calls.Wait()
		e.workerWG.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
