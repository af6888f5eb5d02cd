package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// The batch producer sends batchSize messages per Send call, a call every
// batchEvery from each of batchSenders goroutines sharing one adapter: the
// way an application publishes readings in small batches at a steady
// rate (here 2 × 20 messages every 40ms, 1,000 messages/s). It keeps
// sending until told to stop, so that its calls are in flight across the
// whole fault.
const (
	batchSize    = 20
	batchSenders = 2
	batchEvery   = 40 * time.Millisecond
	// batchesAfter is how many calls that started after the fault healed
	// must be confirmed before the batch producer stops.
	batchesAfter = 5
)

// span is one Send call of the batch producer.
type span struct{ start, end time.Time }

// batcher is the batch producer: goroutines sending multi-message Send
// calls at a steady pace, retrying the unconfirmed messages of a call
// (same ids) until every one is confirmed.
type batcher struct {
	done    chan struct{}
	quit    chan struct{} // closed at the end of the scenario: stop now
	started chan struct{} // one signal per Send call started, dropped when full
	retried chan struct{} // one signal per call left unconfirmed, dropped when full

	mu       sync.Mutex
	spans    []span
	retries  int
	sent     int // messages confirmed
	stopFrom time.Time
	after    int // calls started after stopFrom and confirmed
	stopping bool
	err      error
}

// produceBatches starts the batch producer on a: batchSenders goroutines
// sending their Send calls concurrently on the same adapter; message i
// is mk(i). It runs until stopAfterHeal lets it stop, and is waited for
// at the end of the scenario.
func (e *env) produceBatches(a ports.Sender, mk func(i int) ports.Message) *batcher {
	b := &batcher{done: make(chan struct{}), quit: make(chan struct{}), started: make(chan struct{}, 1), retried: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	for g := range batchSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.run(e, a, func(i int) ports.Message { return mk(i*batchSenders + g) })
		}()
	}
	go func() { wg.Wait(); close(b.done) }()
	// A scenario that failed before stopAfterHeal stops it here.
	e.t.Cleanup(func() { close(b.quit); <-b.done })
	return b
}

// run is one sender of the batch producer.
func (b *batcher) run(e *env, a ports.Sender, mk func(i int) ports.Message) {
	tick := time.NewTicker(batchEvery)
	defer tick.Stop()
	for i := 0; ; i += batchSize {
		msgs := make([]ports.Message, batchSize)
		for j := range msgs {
			msgs[j] = mk(i + j)
		}
		start := time.Now()
		if err := e.sendBatch(a, msgs, b); err != nil {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
			return
		}
		b.mu.Lock()
		b.sent += len(msgs)
		if b.stopping && start.After(b.stopFrom) {
			b.after++
		}
		stop := b.stopping && b.after >= batchesAfter
		b.mu.Unlock()
		if stop {
			return
		}
		select {
		case <-tick.C:
		case <-b.quit:
			return
		case <-e.ctx.Done():
			b.mu.Lock()
			b.err = e.ctx.Err()
			b.mu.Unlock()
			return
		}
	}
}

// sendBatch sends msgs in one Send call and retries the messages the call
// left unconfirmed, with their ids, until all are confirmed. The ledger
// counts a message confirmed only when a Send call that carried it
// returned without naming it (tck.Ledger.Send).
func (e *env) sendBatch(a ports.Sender, msgs []ports.Message, b *batcher) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.Headers.Get(ports.HeaderID)
	}
	e.w.sent(ids...)
	for {
		select {
		case b.started <- struct{}{}:
		default:
		}
		ctx, cancel := context.WithTimeout(e.ctx, sendTimeout)
		s := span{start: time.Now()}
		e.delays.sent(msgs...)
		err := e.l.Send(ctx, a, msgs...)
		s.end = time.Now()
		cancel()
		b.mu.Lock()
		b.spans = append(b.spans, s)
		b.mu.Unlock()
		switch {
		case err == nil:
			return nil
		case e.ctx.Err() != nil:
			return e.ctx.Err()
		case errors.Is(err, ports.ErrClosed), errors.Is(err, ports.ErrInvalid):
			return err
		}
		failed := tck.UnconfirmedIndexes(err, len(msgs))
		var again []ports.Message
		for i, m := range msgs {
			if failed[i] {
				again = append(again, m)
			}
		}
		msgs = again
		b.mu.Lock()
		b.retries++
		b.mu.Unlock()
		select {
		case b.retried <- struct{}{}:
		default:
		}
		select {
		case <-time.After(20 * time.Millisecond): // retry pacing
		case <-b.quit:
			return errStopped
		case <-e.ctx.Done():
			return e.ctx.Err()
		}
	}
}

// awaitCall waits until the batch producer starts a Send call, so that
// the fault injected next finds one in flight.
func (b *batcher) awaitCall(e *env) {
	e.t.Helper()
	select {
	case <-b.started: // a stale signal: wait for the next call
	default:
	}
	select {
	case <-b.started:
	case <-b.done:
		e.t.Fatalf("the batch producer stopped before the fault: %v", b.failure())
	case <-time.After(e.target.Timeout):
		e.t.Fatalf("the batch producer started no Send call within %v", e.target.Timeout)
	}
}

// stopAfterHeal lets the batch producer stop once batchesAfter calls
// started from now on were confirmed: its calls span the fault and the
// recovery.
func (b *batcher) stopAfterHeal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopping = true
	b.stopFrom = time.Now()
}

// overlapping counts the Send calls in flight at some moment of
// [from, to].
func (b *batcher) overlapping(from, to time.Time) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.spans {
		if s.start.Before(to) && s.end.After(from) {
			n++
		}
	}
	return n
}

func (b *batcher) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// wait waits for the batch producer to stop (stopAfterHeal must have been
// called) and fails the scenario if it could not send everything.
func (b *batcher) wait(e *env) {
	e.t.Helper()
	ctx, cancel := withTimeout(e.ctx, e.target)
	defer cancel()
	select {
	case <-b.done:
	case <-ctx.Done():
		e.t.Fatalf("batch producer still sending after %v: %s", e.target.Timeout, b)
	}
	if err := b.failure(); err != nil {
		e.t.Fatalf("batch producer: %v", err)
	}
}

func (b *batcher) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("%d message(s) confirmed in %d Send call(s) of up to %d, %d call(s) retried", b.sent, len(b.spans), batchSize, b.retries)
}
