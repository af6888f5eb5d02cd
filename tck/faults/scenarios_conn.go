package faults

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// outage is how long a stalled link stays stalled: the subject of the
// blackhole and stall scenarios.
const outage = 2 * time.Second

func init() {
	register("broker-restart", restarts("broker-restart", "every producer while it sends"), scenarioRestart)
	register("conn-reset", networked, scenarioReset)
	register("blackhole", networked, scenarioBlackhole)
	register("stall", networked, scenarioStall)
	register("consumer-kill", func(b *Broker, t Target) string {
		if why := networked(b, t); why != "" {
			return "no consumer process to kill: " + why
		}
		return ""
	}, scenarioKill)
}

// restarts is the condition of a scenario that restarts the broker:
// under -race it does not run for a target whose client races with
// itself when what the restart reconnects (named in the reason) sends.
func restarts(scenario, reconnects string) func(*Broker, Target) string {
	return func(b *Broker, t Target) string {
		switch {
		case b.Restart == nil:
			return "the broker has no Restart hook"
		case raceEnabled && t.ClientRace != "":
			return "under -race: a restart reconnects " + reconnects + ", which triggers " + t.ClientRace +
				"; this scenario runs without -race (go test -run TestReliability/" + scenario + ")"
		}
		return ""
	}
}

// batchBase numbers the batch producer's messages apart from the single
// producer's.
const batchBase = 1_000_000

// stream runs on pa a paced producer of single-message sends and a batch
// producer of multi-message Send calls, and on ca a consumer whose
// handlers each work for a while and a consumer of the dead-letter
// topic, so that deliveries, publishes and dead-letter publishes are in
// flight at any moment. Some messages of both producers (one every
// delayEvery of each kind) are sent with a delay or ask to be requeued
// once (with the stream's requeue backoff), so that delayed messages are
// held across the fault too; every tenth of the batch producer's is
// poison (except, for poison and requeues, under -race on a target with
// a ClientRace).
// Once a third of the single stream was acked and a requeued copy and a
// delayed send are held, it waits for a batch Send call to be in flight
// and calls fault, which returns once the fault
// healed; the batch producer keeps sending until batchesAfter calls
// started after that were confirmed. Then a fresh consumer joins the
// group and drains it, and the scenario waits until every confirmed
// message was settled and every confirmed dead letter reached the
// dead-letter topic. A message whose Send returned nil and that nobody
// received fails it (lost in the LEDGER line).
func (e *env) stream(pa, ca ports.Adapter, fault func(p *producer)) {
	e.t.Helper()
	n := e.target.Messages
	e.dlq(ca, nil)
	e.consume(ca, e.streamSpec(), e.work)
	poison, requeue := true, e.requeueOnce()
	if !requeue {
		// The consumer publishes dead letters and requeue copies over its
		// faulted connections.
		poison = false
		e.t.Logf("no poison and no requeues in the stream under -race: a consumer publishing while it reconnects triggers %s", e.target.ClientRace)
	}
	p := e.produce(pa, n, 2*time.Millisecond, func(i int) ports.Message { return e.streamMessage(i, false, requeue) })
	b := e.produceBatches(pa, func(i int) ports.Message { return e.streamMessage(batchBase+i, poison, requeue) })
	e.await("a third of the stream acked before the fault", func(c tck.Counts) bool { return c.Acked >= n/3 })
	e.awaitHeld()
	b.awaitCall(e)
	p.batches = b
	began := time.Now()
	fault(p)
	healed := time.Now()
	b.stopAfterHeal()
	p.wait(e)
	b.wait(e)
	inFlight := b.overlapping(began, healed)
	e.t.Logf("batch producer: %s; %d call(s) in flight during the fault (%v)", b, inFlight, healed.Sub(began).Round(time.Millisecond))
	if inFlight == 0 {
		e.t.Fatalf("no multi-message Send call was in flight during the fault: the scenario proved nothing about confirms across it")
	}
	e.checkHeldAcross(began, healed)
	e.drainFresh(e.work)
	e.t.Logf("producer retried %d unconfirmed send(s)", p.retries.Load())
}

// drainFresh starts a fresh consumer (a new process) in the scenario's
// group and a fresh consumer of the dead-letter topic, sends a marker,
// and waits until every confirmed message was settled and every confirmed
// dead letter arrived (settleAll restarts stuck consumers first).
func (e *env) drainFresh(h func(context.Context, *ports.Delivery) error) {
	e.t.Helper()
	e.l.Mark("fresh-consumer")
	var got atomic.Int64
	fresh := e.adapter()
	e.consume(fresh, e.streamSpec(), func(ctx context.Context, d *ports.Delivery) error {
		got.Add(1)
		return h(ctx, d)
	})
	e.dlq(fresh, nil)
	e.produce(fresh, 1, 0, func(i int) ports.Message { return e.message(2*batchBase+i, false) }).wait(e)
	e.settleAll(h)
	e.deadLettersArrived()
	e.t.Logf("a fresh consumer of the group received %d message(s) at the end", got.Load())
}

// deadLettersArrived waits until every message whose dead-letter publish
// was confirmed was seen on the dead-letter topic, and fails the scenario
// naming those that never were.
func (e *env) deadLettersArrived() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, min(e.target.Timeout/2, 20*time.Second))
	defer cancel()
	for {
		missing := e.l.MissingDeadLetters()
		if len(missing) == 0 {
			return
		}
		seen := e.l.Counts().DeadLetterArrived
		if err := e.l.Await(ctx, "a dead letter on the dead-letter topic", func(c tck.Counts) bool { return c.DeadLetterArrived > seen }); err != nil {
			e.t.Fatalf("%d message(s) dead-lettered with a confirmed publish never reached the dead-letter topic, e.g. %v: %v",
				len(missing), missing[:min(len(missing), 5)], err)
		}
	}
}

// awaitRecovered waits until a message first sent after mark was acked:
// the producer and the consumer both talk to the broker again.
func (e *env) awaitRecovered(mark string) {
	e.t.Helper()
	ctx, cancel := withTimeout(e.ctx, e.target)
	defer cancel()
	for !e.l.Recovered(mark) {
		acked := e.l.Counts().Acked
		if err := e.l.Await(ctx, "an ack after "+mark, func(c tck.Counts) bool { return c.Acked > acked }); err != nil {
			e.t.Fatalf("no message sent after %s was acked: %v", mark, err)
		}
	}
}

// sleep waits d: the duration of a fault, not synchronisation.
func (e *env) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-e.ctx.Done():
	}
}

// begin marks a fault in the ledger and opens its window (see
// Target.BrokerDrops); heal closes it.
func (e *env) begin(name string) *faultWindow {
	e.l.Mark(name)
	return e.w.begin(name)
}

func (e *env) heal(f *faultWindow) { e.w.heal(f) }

// broker-restart: the broker restarts mid-stream (stored messages kept);
// the producer and the consumer are separate processes, and a third
// consumer process of the group, holding what it received, is SIGKILLed
// just before the restart and replaced (where the broker is reached over
// the network).
func scenarioRestart(e *env) {
	if e.b.RestartNote != "" {
		e.t.Logf("broker-restart on %s: %s", e.target.Name, e.b.RestartNote)
	}
	pa, ca := e.adapter(), e.adapter()
	var v *victim
	if networked(e.b, e.target) == "" {
		v = e.startVictim()
	}
	e.stream(pa, ca, func(*producer) {
		if v != nil {
			v.kill(e) // a consumer process dies as the broker goes down
		}
		f := e.begin("restart")
		defer e.heal(f)
		e.restartBroker()
	})
}

// restartBroker restarts the broker within Broker.RestartTimeout (4
// minutes when unset) or fails the scenario.
func (e *env) restartBroker() {
	bound := e.b.RestartTimeout
	if bound <= 0 {
		bound = 4 * time.Minute
	}
	ctx, cancel := context.WithTimeout(e.ctx, bound)
	defer cancel()
	if err := e.b.Restart(ctx); err != nil {
		e.t.Fatalf("restarting the broker: %v", err)
	}
}

// conn-reset: every connection is reset (TCP RST) mid-stream, and again
// once the flow resumed. Each reset must cut at least one connection of
// the producer and one of the consumer.
func scenarioReset(e *env) {
	ls, pa, ca := e.proxied()
	n := e.target.Messages
	e.stream(pa, ca, func(*producer) {
		f := e.begin("reset-1")
		first := ls.reset()
		e.heal(f)
		ls.mustHaveHit(e, "the first reset", first)
		e.await("the stream two-thirds acked", func(c tck.Counts) bool { return c.Acked >= 2*n/3 })
		e.awaitRecovered("reset-1")         // the flow resumed
		ls.awaitLive(e, "the second reset") // and every client has a connection to cut
		f = e.begin("reset-2")
		second := ls.reset()
		e.heal(f)
		ls.mustHaveHit(e, "the second reset", second)
		e.t.Logf("reset %s, then %s", first, second)
	})
}

// blackhole: nothing is forwarded for a while (packets dropped, no
// FIN/RST), then the dead connections are torn down and new ones flow.
func scenarioBlackhole(e *env) {
	ls, pa, ca := e.proxied()
	e.stream(pa, ca, func(*producer) {
		f := e.begin("blackhole")
		ls.stall()
		e.sleep(outage)
		cut := ls.reset()
		ls.resume()
		e.heal(f)
		e.l.Mark("torn-down")
		ls.mustHaveHit(e, "the black hole's tear-down", cut)
		e.t.Logf("black-holed for %v, then reset %s", outage, cut)
	})
}

// stall: nothing is forwarded for a while (stalled reads), then the link
// resumes and the held bytes are delivered late. At least one connection
// of the producer and one of the consumer must be stalled.
func scenarioStall(e *env) {
	ls, pa, ca := e.proxied()
	e.stream(pa, ca, func(*producer) {
		f := e.begin("stall")
		ls.stall()
		held := ls.live()
		e.sleep(outage)
		ls.resume()
		e.heal(f)
		e.l.Mark("resume")
		ls.mustHaveHit(e, "the stall", held)
		e.t.Logf("stalled %s for %v, then resumed", held, outage)
	})
}

// consumer-kill: a consumer process holding completions pending is
// SIGKILLed; a new consumer in the same group gets every message it held.
func scenarioKill(e *env) {
	spec := e.spec()
	spec.InFlight = 8
	victim := e.identity()
	ch := e.startChild(e.b.Addr, victim, spec)
	if l := ch.next(e, "the consumer process to subscribe"); l != "READY" {
		e.t.Fatalf("consumer process said %q, want READY", l)
	}
	a := e.adapter()
	n := max(e.target.Messages/4, 3*spec.InFlight)
	e.produce(a, n, 0, func(i int) ports.Message { return e.message(i, false) }).wait(e)
	var held []string
	for len(held) < spec.InFlight {
		id, pos, ok := parseGot(ch.next(e, "the consumer process to fill its in-flight window"))
		if !ok {
			e.t.Fatalf("unexpected line from the consumer process")
		}
		e.l.Delivered(id, pos)
		held = append(held, id)
	}
	e.l.Mark("kill")
	ch.kill(e)
	for more := true; more; {
		select {
		case line := <-ch.lines:
			if id, pos, ok := parseGot(line); ok {
				e.l.Delivered(id, pos)
				held = append(held, id)
			}
		default:
			more = false
		}
	}
	e.l.Died(held...)
	e.t.Logf("killed the consumer process (pid %d) with %d completion(s) pending", ch.cmd.Process.Pid, len(held))
	e.consume(e.dialAs(e.b.Addr, victim), spec, ok) // the process restarted
	e.produce(a, 10, 0, func(i int) ports.Message { return e.message(n+i, false) }).wait(e)
	e.settled()
	if r := e.l.Report(); r.Windows[tck.WindowInFlight].Count < len(held) {
		e.t.Fatalf("%d message(s) held by the killed process, but only %d redelivered: %+v", len(held), r.Windows[tck.WindowInFlight].Count, r.Windows)
	}
}
