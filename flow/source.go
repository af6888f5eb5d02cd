package flow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluicemq/sluice/ports"
)

// root is the record of one received delivery: its completion, its
// context and its settlement.
//
// Roots are allocated in chunks shared by consecutive receives (see
// takeRoot). Where handlers see a root's Completion (Via, Operate, the
// operators) they may keep it past the settlement (a late second
// completion must still find its own delivery and be refused), so roots
// are reused only in pipelines whose stages hand handlers values alone
// (recycle); a root kept keeps its chunk's roots in memory with it, as a
// kept delivery of the portable layer keeps its chunk of deliveries. A
// root's references are its delivery, its context, its outcome's error
// and the pipeline.
type root struct {
	Completion
	ctx *deliveryCtx
	one [1]*ports.Delivery // the Settle argument, without allocating a slice
	me  [1]*root           // the engine's argument, likewise
	p   *Pipeline
}

// completed settles the delivery from its terminal outcome.
func (r *root) completed(o Outcome) { r.p.settle(r, o) }

func (p *Pipeline) receiveLoop(ctx context.Context) {
	src := Stream[*ports.Delivery]{p: p, ch: p.source, fz: &p.srcFuse}
	defer src.finish()
	// An adapter that appends to a slice of ours gets the same one on
	// every receive, emptied each time the deliveries are handed on.
	appender, _ := p.sub.(ports.ReceiveAppender)
	if pd, ok := p.sub.(ports.Predecoder); ok && p.predecode != nil {
		pd.Predecode(p.predecode)
	}
	var buf []*ports.Delivery
	var slab []root        // roots not handed out yet (takeRoot)
	var ctxs []deliveryCtx // contexts not handed out yet (takeCtx)
	for {
		p.settleAhead()
		n, err := p.slots.acquire(ctx, p.spec.InFlight, p.eng.settleHere)
		if err != nil {
			return
		}
		var ds []*ports.Delivery
		if appender != nil {
			ds, err = appender.ReceiveAppend(ctx, buf[:0], n)
			buf = ds
		} else {
			ds, err = p.sub.Receive(ctx, n)
		}
		if extra := n - len(ds); extra > 0 {
			p.slots.release(extra)
		}
		// The deliveries of one receive are counted together: one atomic
		// add per counter and receive, not per delivery. Counting them
		// as active before the first is handled also tells the engine
		// that more completions are coming until the last one is done,
		// so that it is not woken to flush after each of them.
		if k := int64(len(ds)); k > 0 {
			p.stats.received.Add(k)
			p.stats.inFlight.Add(k)
			p.eng.handed(k)
		}
		p.eng.loopStart()
		for i, d := range ds {
			if !p.emit(ctx, d, p.takeRoot(&slab), takeCtx(&ctxs)) {
				p.eng.loopDone()
				for _, rest := range ds[i+1:] {
					p.abandon(rest, ctx.Err())
				}
				return
			}
		}
		p.eng.loopDone()
		if appender != nil {
			clear(ds) // a delivery's life ends at its settlement, not at our next receive
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ports.ErrClosed) {
				p.fail(fmt.Errorf("flow: receive from %s: %w", p.adapter.Name(), err))
			}
			return
		}
	}
}

// settleAhead settles the pending ACK round on the receive loop before a
// receive that would get less than half the window, when the subscription
// defers its ACKs (ports.Flusher: recording them costs no I/O) and no ACK
// call is under way: the receive gets the slots the round frees (and a
// driver whose reads carry the acks recorded, as Redis's do, sends them
// with it).
func (p *Pipeline) settleAhead() {
	if p.eng.inlineAcks && p.slots.free()*2 < p.spec.InFlight {
		p.eng.settleAhead()
	}
}

// rootChunk is how many roots are allocated at once: a receive of fewer
// deliveries takes its roots from the rest of a chunk, so that a consumer
// that keeps up (one delivery per receive) does not allocate per delivery.
// ctxChunk is the same for contexts.
const (
	rootChunk = 32
	ctxChunk  = 128
)

// takeRoot returns an unused root: one that recycle gave back, or the next
// of slab, a chunk refilled when empty. Called by the receive loop only.
func (p *Pipeline) takeRoot(slab *[]root) *root {
	if len(p.rootsReuse) == 0 && p.recycler != nil {
		p.rootsMu.Lock()
		p.rootsReuse, p.rootsBack = p.rootsBack, p.rootsReuse
		p.rootsMu.Unlock()
	}
	if n := len(p.rootsReuse); n > 0 {
		r := p.rootsReuse[n-1]
		p.rootsReuse = p.rootsReuse[:n-1]
		return r
	}
	if len(*slab) == 0 {
		*slab = make([]root, rootChunk)
	}
	r := &(*slab)[0]
	*slab = (*slab)[1:]
	return r
}

// takeCtx returns an unused context, the next of slab, a chunk refilled
// when empty. Contexts are never reused: a handler may keep its own.
func takeCtx(slab *[]deliveryCtx) *deliveryCtx {
	if len(*slab) == 0 {
		*slab = make([]deliveryCtx, ctxChunk)
	}
	c := &(*slab)[0]
	*slab = (*slab)[1:]
	return c
}

// recycle gives the deliveries of an acknowledged round, and their roots,
// back for reuse (ports.Recycler): the pipeline's stages hand handlers
// values only (no delivery, item or completion), so once acknowledged a
// delivery is reachable from its context alone, and one whose context
// gave it away (DeliveryFrom) or is reading it is left alone. ds is the
// round's Settle argument, reused here. Called by the engine.
func (p *Pipeline) recycle(rs []*root, ds []*ports.Delivery) {
	keep := ds[:0]
	for _, r := range rs {
		if r.ctx.release() {
			keep = append(keep, r.one[0])
		}
	}
	if len(keep) == 0 {
		return
	}
	p.recycler.Recycle(keep)
	p.rootsMu.Lock()
	defer p.rootsMu.Unlock()
	for _, r := range rs {
		if r.ctx.state.Load() == ctxRecycled && len(p.rootsBack) < 2*p.spec.InFlight {
			*r = root{}
			p.rootsBack = append(p.rootsBack, r)
		}
	}
}

// emit hands d to the first stage, with r, unused so far, as its root;
// false when the source is stopping. The receive loop counted d as
// received, in flight and active already.
func (p *Pipeline) emit(ctx context.Context, d *ports.Delivery, r *root, c *deliveryCtx) bool {
	r.p = p
	c.Context, c.d, c.p = p.workCtx, d, p
	r.ctx = c
	r.one[0] = d
	r.me[0] = r
	r.next = r
	r.report = p.report
	p.observe(Event{Delivery: d, Received: true})
	if d.Err != nil {
		// The adapter could not decode the envelope: poison, unhandled.
		_ = r.Fail(ports.Poison(d.Err))
		return true
	}
	if !p.spec.MatchKey(d.Key) {
		// Not addressed to this subscription; the adapter could not
		// filter natively. Acknowledge without handling.
		p.stats.filtered.Add(1)
		_ = r.Succeed()
		return true
	}
	it := Item[*ports.Delivery]{Ctx: c, Value: d, Msg: d, Completion: &r.Completion}
	if p.srcFuse.push != nil {
		// The first stage runs here, inline (see fused): it is handed
		// on, as into the channel (which has room for every delivery
		// the slots let in, up to 256), and its stage cancels it once
		// the pipeline's work is cancelled.
		p.srcFuse.push(it)
		return true
	}
	select {
	case p.source <- it:
		return true
	case <-ctx.Done():
		_ = r.Cancel(ctx.Err())
		return false
	}
}

// abandon gives back a delivery that was received but never handed on.
// The receive loop counted it as received, in flight and active: it stays
// received, and is given back as a cancellation.
func (p *Pipeline) abandon(d *ports.Delivery, cause error) {
	p.stats.cancelled.Add(1)
	p.observe(Event{Delivery: d, Outcome: Outcome{Kind: Cancelled, Err: cause}})
	p.release(1)
}

// settle hands a delivery's terminal outcome to the settlement engine.
// It never calls the adapter: the engine does, from its own goroutines
// (or the receive loop's, see engine.settleHere).
func (p *Pipeline) settle(r *root, o Outcome) {
	if !p.unsettled(r, o) {
		return
	}
	if !p.eng.enqueue(r.me[:], p.disposition(r.one[0], o)) {
		p.late(r, o)
	}
}

// settleBatch hands the members of a batch (a Join whose members are the
// pipeline's own deliveries) to the engine together, so that the batch is
// carried out with one Settle call per disposition: one for an ACK, one
// per redelivery count for a REQUEUE or DEAD_LETTER. It may overwrite rs
// (the engine copies what it keeps).
func (p *Pipeline) settleBatch(rs []*root, o Outcome) {
	if o.Kind == Succeeded {
		keep := rs[:0] // filtered in place: no slice grown per batch
		for _, r := range rs {
			if p.unsettled(r, o) {
				keep = append(keep, r)
			}
		}
		if len(keep) > 0 && !p.eng.enqueue(keep, ports.Disposition{Action: ports.Ack}) {
			for _, r := range keep {
				p.late(r, o)
			}
		}
		return
	}
	byCount := map[int][]*root{}
	var order []int
	for _, r := range rs {
		if !p.unsettled(r, o) {
			continue
		}
		c := r.one[0].RedeliveryCount
		if _, ok := byCount[c]; !ok {
			order = append(order, c)
		}
		byCount[c] = append(byCount[c], r)
	}
	for _, c := range order {
		group := byCount[c]
		if !p.eng.enqueue(group, p.disposition(group[0].one[0], o)) {
			for _, r := range group {
				p.late(r, o)
			}
		}
	}
}

// unsettled accounts for an outcome that is not settled (a cancellation,
// or a completion after Stop) and reports false for it; true means the
// outcome is to be settled.
func (p *Pipeline) unsettled(r *root, o Outcome) bool {
	if o.Kind == Cancelled {
		p.stats.cancelled.Add(1)
		p.observe(Event{Delivery: r.one[0], Outcome: o})
		p.release(1)
		return false
	}
	if p.closed.Load() {
		p.late(r, o)
		return false
	}
	return true
}

// late reports a completion that arrived after Stop had cancelled
// in-flight work: it is not settled and the broker redelivers it.
func (p *Pipeline) late(r *root, o Outcome) {
	d := r.one[0]
	p.stats.unsettled.Add(1)
	p.report(&LateCompletionError{ID: d.ID, Outcome: o})
	p.observe(Event{Delivery: d, Outcome: o})
	p.release(1)
}

// release gives back the slots of n deliveries that need no settlement.
func (p *Pipeline) release(n int) {
	p.stats.inFlight.Add(-int64(n))
	p.slots.release(n)
	p.eng.done(n)
}

// settledAll accounts for the deliveries of rs after the engine's Settle
// call for them returned err. A successful ACK with no observer is
// counted with one add for the call, not one per delivery.
func (p *Pipeline) settledAll(rs []*root, disp ports.Disposition, err error) {
	if err == nil && disp.Action == ports.Ack && p.cfg.observer == nil {
		p.stats.acked.Add(int64(len(rs)))
		return
	}
	for _, r := range rs {
		p.settled(r, disp, err)
	}
}

// settled accounts for one delivery after the engine's Settle call for it
// returned err.
func (p *Pipeline) settled(r *root, disp ports.Disposition, err error) {
	d := r.one[0]
	o := r.Outcome()
	if err != nil {
		p.stats.settleErrors.Add(1)
		p.report(&SettleError{ID: d.ID, Action: disp.Action, Err: err})
		p.observe(Event{Delivery: d, Outcome: o, Err: err})
		return
	}
	switch disp.Action {
	case ports.Ack:
		p.stats.acked.Add(1)
	case ports.Requeue:
		p.stats.requeued.Add(1)
		p.logSettled("sluice: requeued", d, disp)
	case ports.DeadLetter:
		p.stats.deadLettered.Add(1)
		p.logSettled("sluice: dead-lettered", d, disp)
	}
	p.observe(Event{Delivery: d, Outcome: o, Action: disp.Action})
}

// logSettled logs one requeue or dead letter at Debug level: the
// delivery's id, its attempt and the reason, never its payload.
func (p *Pipeline) logSettled(msg string, d *ports.Delivery, disp ports.Disposition) {
	l := p.cfg.logger
	if !l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attempt := disp.Attempts
	if attempt == 0 {
		attempt = d.RedeliveryCount + 1
	}
	reason := ""
	if disp.Reason != nil {
		reason = disp.Reason.Error()
	}
	attrs := []any{"id", d.ID, "attempt", attempt, "reason", reason, "topic", string(p.spec.Topic), "adapter", p.adapterName()}
	if disp.Action == ports.Requeue {
		attrs = append(attrs, "delay", disp.Delay)
	}
	l.Debug(msg, attrs...)
}

// disposition applies the state machine of the settlement contract.
func (p *Pipeline) disposition(d *ports.Delivery, o Outcome) ports.Disposition {
	attempts := d.RedeliveryCount + 1
	retry := p.spec.Retry
	switch o.Kind {
	case Succeeded:
		return ports.Disposition{Action: ports.Ack}
	case Poisoned:
		return p.deadLetter(o.Err, attempts)
	}
	if retry.MaxAttempts > 0 && attempts >= retry.MaxAttempts {
		return p.deadLetter(&RetriesExhaustedError{Attempts: attempts, Last: o.Err}, attempts)
	}
	return ports.Disposition{Action: ports.Requeue, Reason: o.Err, Delay: retry.Delay(attempts), Attempts: attempts}
}

func (p *Pipeline) deadLetter(reason error, attempts int) ports.Disposition {
	if p.spec.DisableDeadLetter {
		p.report(fmt.Errorf("dead letter disabled for %s: requeueing after %v: %w", p.spec.Topic, p.spec.Retry.MaxBackoff, reason))
		return ports.Disposition{Action: ports.Requeue, Reason: reason, Delay: p.spec.Retry.MaxBackoff, Attempts: attempts}
	}
	return ports.Disposition{Action: ports.DeadLetter, Reason: reason, Attempts: attempts}
}

// RetriesExhaustedError is the dead-letter reason of a delivery that failed
// on every one of its attempts.
type RetriesExhaustedError struct {
	Attempts int
	Last     error
}

func (e *RetriesExhaustedError) Error() string {
	return fmt.Sprintf("retries exhausted after %d attempts: %v", e.Attempts, e.Last)
}
func (e *RetriesExhaustedError) Unwrap() error { return e.Last }

// SettleError reports a settlement the adapter could not carry out. The
// delivery stays unsettled and the broker will redeliver it.
type SettleError struct {
	ID     string
	Action ports.Action
	Err    error
}

func (e *SettleError) Error() string {
	return fmt.Sprintf("settle %s of message %s: %v (left unsettled)", e.Action, e.ID, e.Err)
}
func (e *SettleError) Unwrap() error { return e.Err }

// LateCompletionError reports a delivery that completed after Stop had
// cancelled in-flight work. It is not settled; the broker redelivers it.
type LateCompletionError struct {
	ID      string
	Outcome Outcome
}

func (e *LateCompletionError) Error() string {
	return fmt.Sprintf("message %s completed (%v) after stop: not settled, it will be redelivered", e.ID, e.Outcome.Kind)
}
