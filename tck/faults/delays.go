package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// The stream's delayed messages: some of its messages ask to be requeued
// once, with the requeue backoff below, and some are sent with
// Message.Delay, so that whenever the fault strikes, requeued copies and
// delayed sends are held somewhere (by the broker natively, or by the
// consuming adapter's scheduler) and must all come back afterwards.
//
// Each kind is paced (one every delayEvery): where the consuming adapter
// holds a delayed message, it holds one of the subscription's in-flight
// slots at the broker for the whole delay, so a steady share of delayed
// messages would cap the consumer below the producers' rate.
const (
	// requeueBackoff is the stream's requeue delay: long enough that the
	// copies requeued just before a fault are still held when it strikes.
	requeueBackoff = 1500 * time.Millisecond
	// sendDelay is the Message.Delay of the stream's delayed sends.
	sendDelay = 1500 * time.Millisecond
	// delayEvery paces each kind of delayed message.
	delayEvery = 400 * time.Millisecond
)

// delays records the stream's requeue-once decisions and delayed sends,
// to prove some were held across the fault.
type delays struct {
	mu                    sync.Mutex
	failed                map[string]bool // ids whose first delivery the handler failed
	requeues              []time.Time     // when each requeue was asked for
	sends                 []time.Time     // when each delayed send call started
	lastRequeue, lastSend time.Time       // the last message made to be requeued, delayed
	signal                chan struct{}   // a requeue was asked for or a delayed send started
}

// newDelays returns an empty record.
func newDelays() *delays {
	return &delays{failed: map[string]bool{}, signal: make(chan struct{}, 1)}
}

// notify wakes awaitHeld (with d.mu held).
func (d *delays) notify() {
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

// due reports whether the next message of a kind (last) is due, and
// records it if so.
func (d *delays) due(last *time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now := time.Now(); now.Sub(*last) >= delayEvery {
		*last = now
		return true
	}
	return false
}

// errRequeueOnce is the retryable error of a message's first delivery
// when it asks for a requeue (body.Requeue).
var errRequeueOnce = errors.New("faults: requeue once, as asked by the message")

// firstDelivery reports whether id was not failed yet in this scenario,
// and records the requeue asked for now when it was not.
func (d *delays) firstDelivery(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed[id] {
		return false
	}
	d.failed[id] = true
	d.requeues = append(d.requeues, time.Now())
	d.notify()
	return true
}

// sent records the start of a send call of msgs: the time of each
// delayed one.
func (d *delays) sent(msgs ...ports.Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for _, m := range msgs {
		if m.Delay > 0 {
			d.sends = append(d.sends, now)
			d.notify()
		}
	}
}

// holding reports whether a requeue asked for (when requeues is set) and a
// delayed send started are both recent enough to be held for at least
// half their delay more, and returns the channel that signals the next
// one.
func (d *delays) holding(requeues bool) (bool, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	recent := func(at []time.Time, delay time.Duration) bool {
		return len(at) > 0 && time.Since(at[len(at)-1]) < delay/2
	}
	return (!requeues || recent(d.requeues, requeueBackoff)) && recent(d.sends, sendDelay), d.signal
}

// awaitHeld waits until a requeued copy and a delayed send are held, so
// that the fault injected next finds both held.
func (e *env) awaitHeld() {
	e.t.Helper()
	ctx, cancel := withTimeout(e.ctx, e.target)
	defer cancel()
	for {
		ok, signal := e.delays.holding(e.requeueOnce())
		if ok {
			return
		}
		select {
		case <-signal:
		case <-ctx.Done():
			e.delays.mu.Lock()
			requeues, sends := len(e.delays.requeues), len(e.delays.sends)
			e.delays.mu.Unlock()
			e.t.Fatalf("no requeued copy and delayed send held at once within %v: the consumer asked for %d requeue(s), the producers started %d delayed send(s)",
				e.target.Timeout, requeues, sends)
		}
	}
}

// heldAcross counts the requeues and delayed sends due inside [from, to]
// or later although asked for before to: held somewhere while the fault
// lasted.
func (d *delays) heldAcross(from, to time.Time) (requeues, sends int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	count := func(at []time.Time, delay time.Duration) int {
		n := 0
		for _, t := range at {
			if t.Before(to) && t.Add(delay).After(from) {
				n++
			}
		}
		return n
	}
	return count(d.requeues, requeueBackoff), count(d.sends, sendDelay)
}

// streamSpec is the scenario's subscription with the stream's requeue
// backoff.
func (e *env) streamSpec() ports.SubscriptionSpec {
	s := e.spec()
	s.Retry.Backoff, s.Retry.MaxBackoff = requeueBackoff, 2*requeueBackoff
	return s
}

// streamMessage is message i of the stream: poison when poison is set
// and i%10 == 9; otherwise, at most one every delayEvery, a message that
// asks to be requeued once (when requeue is set) or one sent with
// sendDelay.
func (e *env) streamMessage(i int, poison, requeue bool) ports.Message {
	b := body{N: i, Poison: poison && i%10 == 9}
	b.Requeue = !b.Poison && requeue && e.delays.due(&e.delays.lastRequeue)
	m := e.messageOf(b)
	if !b.Poison && !b.Requeue && e.delays.due(&e.delays.lastSend) {
		m.Delay = sendDelay
	}
	return m
}

// work is the stream's handler: it works for 10ms (the business side
// effect), rejects poison as a business rule would, and fails the first
// delivery of a message that asks to be requeued once.
func (e *env) work(ctx context.Context, d *ports.Delivery) error {
	b, err := decodeBody(d)
	switch {
	case err != nil:
		return err
	case b.Poison:
		return ports.Poisonf("message %d is poison", b.N)
	case b.Requeue && e.delays.firstDelivery(d.ID):
		return fmt.Errorf("message %d: %w", b.N, errRequeueOnce)
	}
	select {
	case <-time.After(10 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkHeldAcross fails the scenario when no requeued copy or no delayed
// send was held while the fault lasted: it then proved nothing about
// them.
func (e *env) checkHeldAcross(from, to time.Time) {
	e.t.Helper()
	requeues, sends := e.delays.heldAcross(from, to)
	e.t.Logf("held across the fault: %d requeued cop(ies) (backoff %v), %d delayed send(s) (Delay %v)", requeues, requeueBackoff, sends, sendDelay)
	if (requeues == 0 && e.requeueOnce()) || sends == 0 {
		e.t.Fatalf("no requeued copy (%d) or no delayed send (%d) was held while the fault lasted: the scenario proved nothing about delayed messages across it", requeues, sends)
	}
}

// requeueOnce reports whether the stream's messages ask to be requeued
// once: not under -race on a target with a ClientRace, where the
// consumer would publish requeue copies over its faulted connections
// (see stream).
func (e *env) requeueOnce() bool { return !raceEnabled || e.target.ClientRace == "" }
