package faults

import (
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// victim is a consumer process in the scenario's group (this test binary,
// re-executed) that holds the completions of what it receives until it
// is SIGKILLed: the broker-restart scenario kills it as the broker goes
// down, as an orchestrator kills pods around a broker restart, and a
// consumer playing the same process identity replaces it.
type victim struct {
	ch       *child
	identity string
	spec     ports.SubscriptionSpec
	done     <-chan struct{} // every line handled, the process gone

	mu   sync.Mutex
	held []string
}

// startVictim starts the victim consumer and records what it receives in
// the ledger.
func (e *env) startVictim() *victim {
	e.t.Helper()
	spec := e.spec()
	spec.InFlight = 8
	v := &victim{identity: e.identity(), spec: spec}
	v.ch = e.startChild(e.b.Addr, v.identity, spec)
	if l := v.ch.next(e, "the victim consumer process to subscribe"); l != "READY" {
		e.t.Fatalf("victim consumer process said %q, want READY", l)
	}
	v.done = v.ch.each(func(line string) { v.got(e, line) })
	return v
}

func (v *victim) got(e *env, line string) {
	id, pos, ok := parseGot(line)
	if !ok {
		return
	}
	e.l.Delivered(id, pos)
	v.mu.Lock()
	v.held = append(v.held, id)
	v.mu.Unlock()
}

// kill SIGKILLs the victim, records that its held deliveries died with
// it, and starts its replacement (the same process identity, as a
// restarted pod) with handler work.
func (v *victim) kill(e *env) {
	e.t.Helper()
	e.l.Mark("victim-kill")
	v.ch.kill(e)
	<-v.done
	v.mu.Lock()
	held := v.held
	v.mu.Unlock()
	e.l.Died(held...)
	e.t.Logf("killed a consumer process (pid %d) holding %d delivery(ies) as the broker went down", v.ch.cmd.Process.Pid, len(held))
	e.consume(e.dialAs(e.b.Addr, v.identity), v.spec, e.work)
}
