package faults

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// outage is how long a stalled link stays stalled: the subject of the
// blackhole and stall scenarios.
const outage = 2 * time.Second

func init() {
	register("broker-restart", func(b *Broker, t Target) string {
		switch {
		case b.Restart == nil:
			return "the broker has no Restart hook"
		case raceEnabled && t.ClientRace != "":
			return "under -race: a restart reconnects every producer while it sends, which triggers " + t.ClientRace +
				"; this scenario runs without -race (go test -run TestReliability/broker-restart)"
		}
		return ""
	}, scenarioRestart)
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

// stream runs a paced producer on pa and a consumer on ca whose handlers
// each work for a while, so that several deliveries are in flight and
// several publishes unconfirmed at any moment; it calls fault once a
// third of the stream was acked, and waits until the producer sent
// everything and every confirmed message was settled.
func (e *env) stream(pa, ca ports.Adapter, fault func(p *producer)) {
	e.t.Helper()
	n := e.target.Messages
	e.consume(ca, e.spec(), work)
	p := e.produce(pa, n, 2*time.Millisecond, func(i int) ports.Message { return e.message(i, false) })
	e.await("a third of the stream acked before the fault", func(c tck.Counts) bool { return c.Acked >= n/3 })
	fault(p)
	p.wait(e)
	e.settleAll(work)
	e.t.Logf("producer retried %d unconfirmed send(s)", p.retries.Load())
}

// work is a handler that works for 10ms (the business side effect).
func work(ctx context.Context, _ *ports.Delivery) error {
	select {
	case <-time.After(10 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits d: the duration of a fault, not synchronisation.
func (e *env) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-e.ctx.Done():
	}
}

// proxied returns a proxy and a producer and a consumer adapter behind
// it; under -race with a ClientRace the producer connects directly.
func (e *env) proxied() (px *Proxy, pa, ca ports.Adapter) {
	px = e.proxy()
	ca = e.dial(px.Addr())
	if e.b.Proxy != nil {
		return px, e.adapter(), ca // every connection goes through it anyway
	}
	if raceEnabled && e.target.ClientRace != "" {
		e.t.Logf("under -race only the consumer's connections go through the faulted proxy: a producer reconnecting while it sends triggers %s", e.target.ClientRace)
		return px, e.adapter(), ca
	}
	return px, e.dial(px.Addr()), ca
}

// broker-restart: the broker restarts mid-stream (stored messages kept);
// the producer and the consumer are separate processes.
func scenarioRestart(e *env) {
	if e.b.RestartNote != "" {
		e.t.Logf("broker-restart on %s: %s", e.target.Name, e.b.RestartNote)
	}
	pa, ca := e.adapter(), e.adapter()
	e.stream(pa, ca, func(*producer) {
		e.l.Mark("restart")
		bound := e.b.RestartTimeout
		if bound <= 0 {
			bound = 4 * time.Minute
		}
		ctx, cancel := context.WithTimeout(e.ctx, bound)
		defer cancel()
		if err := e.b.Restart(ctx); err != nil {
			e.t.Fatalf("restarting the broker: %v", err)
		}
	})
}

// conn-reset: every connection is reset (TCP RST) mid-stream, and again
// once the flow resumed.
func scenarioReset(e *env) {
	px, pa, ca := e.proxied()
	n := e.target.Messages
	e.stream(pa, ca, func(*producer) {
		e.l.Mark("reset-1")
		first := px.Reset()
		e.await("the flow resumed after the first reset", func(c tck.Counts) bool { return c.Acked >= 2*n/3 })
		e.l.Mark("reset-2")
		second := px.Reset()
		e.t.Logf("reset %d then %d connection(s)", first, second)
	})
}

// blackhole: nothing is forwarded for a while (packets dropped, no
// FIN/RST), then the dead connections are torn down and new ones flow.
func scenarioBlackhole(e *env) {
	px, pa, ca := e.proxied()
	e.stream(pa, ca, func(*producer) {
		e.l.Mark("blackhole")
		px.Stall()
		e.sleep(outage)
		n := px.Reset()
		px.Resume()
		e.l.Mark("torn-down")
		e.t.Logf("black-holed for %v, then reset %d connection(s)", outage, n)
	})
}

// stall: nothing is forwarded for a while (stalled reads), then the link
// resumes and the held bytes are delivered late.
func scenarioStall(e *env) {
	px, pa, ca := e.proxied()
	e.stream(pa, ca, func(*producer) {
		e.l.Mark("stall")
		px.Stall()
		e.sleep(outage)
		px.Resume()
		e.l.Mark("resume")
		e.t.Logf("stalled for %v, then resumed; proxy %+v", outage, px.Stats())
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
