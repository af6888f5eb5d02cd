package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

func init() {
	register("dlq-fail", func(b *Broker, _ Target) string {
		if b.FailDeadLetters == nil {
			return "the broker has no FailDeadLetters hook"
		}
		return ""
	}, scenarioDLQFail)
	register("send-unconfirmed", func(b *Broker, t Target) string {
		switch {
		case b.FailSends == nil:
			return "the broker has no FailSends hook"
		case raceEnabled && t.ClientRace != "" && b.FailSendsReconnects:
			return "under -race: unconfirmed sends make the client reconnect its producer while it sends, which triggers " + t.ClientRace +
				"; this scenario runs without -race (go test -run TestReliability/send-unconfirmed)"
		}
		return ""
	}, scenarioSendUnconfirmed)
	register("handler-panic", always, scenarioPanic)
	register("slow-handler", always, scenarioSlow)
	register("poison-flood", always, scenarioPoisonFlood)
}

func decodeBody(d *ports.Delivery) (body, error) {
	var b body
	if err := json.Unmarshal(d.Payload, &b); err != nil {
		return b, ports.Poison(err)
	}
	return b, nil
}

// dlq-fail: dead-letter publishes fail; no original may be settled and
// none may reach the dead-letter topic while the fault lasts — watched
// for its whole duration, not at one instant: the dead-letter consumer
// records every arrival before the heal. Once the fault heals and the
// consumer restarts, every one is dead-lettered and reaches the
// dead-letter topic.
func scenarioDLQFail(e *env) {
	a := e.adapter()
	var healed atomic.Bool
	var early, arrivals atomic.Int64
	seen := sync.Map{}
	var twice atomic.Int64
	e.dlq(a, func(_ context.Context, d *ports.Delivery) error {
		arrivals.Add(1)
		if !healed.Load() {
			early.Add(1)
		}
		if _, dup := seen.LoadOrStore(d.ID, true); dup {
			twice.Add(1)
		}
		return nil
	})
	n := e.spec().InFlight / 2 // unsettled originals hold in-flight slots
	reject := func(context.Context, *ports.Delivery) error { return ports.Poisonf("rejected by a business rule") }
	e.b.FailDeadLetters(true)
	c := e.consume(a, e.spec(), reject)
	e.produce(a, n, 0, func(i int) ports.Message { return e.message(i, true) }).wait(e)
	e.await("every dead-letter publish to fail", func(c tck.Counts) bool { return c.SettleFailed >= n })
	e.sleep(dlqFaultHold) // the fault lasts a while after the failures: a copy stored despite them has time to arrive
	if c := e.l.Counts(); c.DeadLettered+c.Acked != 0 || early.Load() != 0 {
		e.t.Fatalf("while dead-letter publishes failed, %d original(s) were settled and %d message(s) reached the dead-letter topic: %+v",
			c.DeadLettered+c.Acked, early.Load(), c)
	}
	e.l.Mark("heal")
	healed.Store(true)
	e.b.FailDeadLetters(false)
	c.stop() // hands the unsettled originals back to the broker
	e.consume(e.replace(c), e.spec(), reject)
	e.settled()
	e.await("every dead letter on the dead-letter topic", func(c tck.Counts) bool { return c.DeadLetterArrived == n })
	if c := e.l.Counts(); c.DeadLettered != n || c.Acked != 0 {
		e.t.Fatalf("after the fault healed: %+v, want %d dead-lettered and none acked", c, n)
	}
	if early.Load() != 0 {
		e.t.Fatalf("%d dead letter(s) arrived while the fault lasted: a dead-letter publish reported failed was stored", early.Load())
	}
	if twice.Load() != 0 { // at least once: a dead letter repeated after the heal is a duplicate, not a failure
		e.t.Logf("%d dead letter(s) arrived twice after the fault healed", twice.Load())
	}
}

// dlqFaultHold is how long dlq-fail keeps dead-letter publishes failing
// after all of them failed: the duration of the fault.
const dlqFaultHold = 500 * time.Millisecond

// send-unconfirmed: publishes go unconfirmed for a while; the producer
// retries each with the same id. Nothing confirmed may be lost; a message
// stored without its confirm is delivered twice (publish-retry window).
func scenarioSendUnconfirmed(e *env) {
	if e.b.FailSendsNote != "" {
		e.t.Logf("send-unconfirmed on %s: %s", e.target.Name, e.b.FailSendsNote)
	}
	pa, ca := e.adapter(), e.adapter()
	e.stream(pa, ca, func(p *producer) {
		for drained := false; !drained; { // stale signals, from before the fault
			select {
			case <-p.retried:
			case <-p.batches.retried:
			default:
				drained = true
			}
		}
		e.l.Mark("fail-sends")
		e.b.FailSends(true)
		// Two calls left unconfirmed, one of them a multi-message call:
		// the fault spans a batch (an in-process broker answers a call
		// long before the fault would otherwise end). The single-message
		// producer may have sent its last message before the fault began
		// on a loaded machine, so either producer counts for the two.
		deadline := time.After(e.target.Timeout)
		var singles, batches int
		for singles+batches < 2 || batches == 0 {
			select {
			case <-p.retried:
				singles++
			case <-p.batches.retried:
				batches++
			case <-deadline:
				e.t.Fatalf("in %v the producers saw %d unconfirmed single-message and %d unconfirmed multi-message Send call(s), want two, one of them multi-message",
					e.target.Timeout, singles, batches)
			}
		}
		e.b.FailSends(false)
		e.l.Mark("heal")
	})
}

// handler-panic: handlers panic. A panic is a retryable failure: message
// 1 panics on every attempt and is dead-lettered with the panic as its
// reason; every third message panics once and is then acked. The pipeline
// survives all of it.
func scenarioPanic(e *env) {
	a := e.adapter()
	reasons := make(chan string, 16)
	e.dlq(a, func(_ context.Context, d *ports.Delivery) error {
		reasons <- d.Headers.Get(ports.HeaderDeadLetterReason)
		return nil
	})
	spec := e.spec()
	spec.Retry.MaxAttempts = 3
	c := e.consume(a, spec, func(_ context.Context, d *ports.Delivery) error {
		b, err := decodeBody(d)
		if err != nil {
			return err
		}
		if b.N == 1 {
			panic("handler bug hit by every attempt")
		}
		if b.N%3 == 0 && d.RedeliveryCount == 0 {
			panic(fmt.Sprintf("handler bug on message %d", b.N))
		}
		return nil
	})
	n := e.target.Messages / 2
	e.produce(a, n, 0, func(i int) ports.Message { return e.message(i, false) }).wait(e)
	e.settled()
	e.await("the dead letter of the always-panicking message", func(c tck.Counts) bool { return c.DeadLetterArrived == 1 })
	cnt := e.l.Counts()
	if cnt.DeadLettered != 1 || cnt.Acked != n-1 || cnt.Requeued < n/3 {
		e.t.Fatalf("counts %+v: want 1 dead-lettered, %d acked, at least %d requeued", cnt, n-1, n/3)
	}
	if err := c.p.Err(); err != nil {
		e.t.Fatalf("the pipeline died of a handler panic: %v", err)
	}
	select {
	case reason := <-reasons:
		if !strings.Contains(reason, "panic") {
			e.t.Fatalf("dead-letter reason %q, want the panic", reason)
		}
	case <-time.After(e.target.Timeout):
		e.t.Fatalf("the dead letter's handler never ran")
	}
}

// slow-handler: handlers are slow and outnumber the in-flight limit; the
// deliveries in flight never exceed it and nothing is lost.
func scenarioSlow(e *env) {
	const limit = 4
	a := e.adapter()
	spec := e.spec()
	spec.InFlight = limit
	var cur, peak atomic.Int32
	e.consumeOn(a, spec, 4*limit, func(ctx context.Context, _ *ports.Delivery) error {
		now := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		select { // the slowness is the subject
		case <-time.After(15 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	n := min(e.target.Messages, 80)
	e.produce(a, n, 0, func(i int) ports.Message { return e.message(i, false) }).wait(e)
	e.settled()
	r := e.l.Report()
	if p := peak.Load(); p > limit || r.PeakInFlight > limit {
		e.t.Fatalf("in flight: %d handlers at once, %d deliveries unsettled at once; limit %d", p, r.PeakInFlight, limit)
	}
	e.t.Logf("peak %d handlers and %d deliveries in flight (limit %d) with %d handler goroutines", peak.Load(), r.PeakInFlight, limit, 4*limit)
}

// poison-flood: nine messages in ten are poison. Every poison message is
// dead-lettered, and the healthy ones keep flowing: each is acked within
// a bound while the flood is being dead-lettered.
func scenarioPoisonFlood(e *env) {
	a := e.adapter()
	e.dlq(a, nil)
	var mu sync.Mutex
	var worst, total time.Duration
	var healthy int
	e.consume(a, e.spec(), func(_ context.Context, d *ports.Delivery) error {
		b, err := decodeBody(d)
		if err != nil {
			return err
		}
		if b.Poison {
			return ports.Poisonf("message %d is poison", b.N)
		}
		lat := time.Since(time.Unix(0, b.SentAt))
		mu.Lock()
		defer mu.Unlock()
		healthy++
		total += lat
		worst = max(worst, lat)
		return nil
	})
	n := e.target.Messages
	e.produce(a, n, 0, func(i int) ports.Message { return e.message(i, i%10 != 0) }).wait(e)
	e.settled()
	poison := n - (n+9)/10
	e.await("every poison message on the dead-letter topic", func(c tck.Counts) bool { return c.DeadLetterArrived == poison })
	if c := e.l.Counts(); c.DeadLettered != poison || c.Acked != n-poison {
		e.t.Fatalf("counts %+v: want %d dead-lettered and %d acked", c, poison, n-poison)
	}
	mu.Lock()
	defer mu.Unlock()
	e.t.Logf("healthy messages: %d, latency from send to handler mean %v, worst %v, among %d poison", healthy,
		(total / time.Duration(max(healthy, 1))).Round(time.Millisecond), worst.Round(time.Millisecond), poison)
	if bound := e.target.Timeout / 4; worst > bound {
		e.t.Fatalf("a healthy message waited %v behind the poison (bound %v)", worst, bound)
	}
}
