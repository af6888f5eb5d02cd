package faults

import (
	"fmt"

	"github.com/sluicemq/sluice/ports"
)

// links are the proxies the connection scenarios fault: one in front of
// the producer process and one in front of the consumer process, so that
// each fault can be shown to have hit both. A broker that already sits
// behind a proxy it advertises (Broker.Proxy) has one for every
// connection, and the connections cannot be told apart.
type links struct {
	prod, cons *Proxy
	shared     bool   // prod == cons: the broker's own proxy
	direct     string // why the producer connects directly, "" when it does not
}

// hits is what one fault did to the producer's and the consumer's
// connections.
type hits struct{ prod, cons int }

func (h hits) String() string {
	return fmt.Sprintf("%d producer and %d consumer connection(s)", h.prod, h.cons)
}

// proxied returns the links and a producer and a consumer adapter behind
// them; under -race with a ClientRace the producer connects directly.
func (e *env) proxied() (ls links, pa, ca ports.Adapter) {
	if e.b.Proxy != nil { // every connection goes through it anyway
		ls = links{prod: e.b.Proxy, cons: e.b.Proxy, shared: true}
		return ls, e.adapter(), e.adapter()
	}
	ls.cons = e.proxy()
	ca = e.dial(ls.cons.Addr())
	if raceEnabled && e.target.ClientRace != "" {
		ls.direct = "under -race a producer reconnecting while it sends triggers " + e.target.ClientRace
		e.t.Logf("only the consumer's connections go through the faulted proxy: %s", ls.direct)
		return ls, e.adapter(), ca
	}
	ls.prod = e.proxy()
	return ls, e.dial(ls.prod.Addr()), ca
}

func (ls links) each(f func(*Proxy) int) hits {
	if ls.shared {
		n := f(ls.cons)
		return hits{prod: n, cons: n}
	}
	h := hits{cons: f(ls.cons)}
	if ls.prod != nil {
		h.prod = f(ls.prod)
	}
	return h
}

// reset resets every proxied connection.
func (ls links) reset() hits { return ls.each((*Proxy).Reset) }

// stall stalls every proxied connection.
func (ls links) stall() { ls.each(func(p *Proxy) int { p.Stall(); return 0 }) }

// resume resumes them.
func (ls links) resume() { ls.each(func(p *Proxy) int { p.Resume(); return 0 }) }

// live counts the open proxied connections.
func (ls links) live() hits { return ls.each(func(p *Proxy) int { return p.Stats().Live }) }

// awaitLive waits until a fault would hit what mustHaveHit asks for: an
// open connection of the producer and one of the consumer (two on a
// shared proxy). A client connects again after a fault only when it next
// needs the broker, so one that had its fill before the fault may have
// none yet when the flow resumed: a second fault then would prove nothing.
func (ls links) awaitLive(e *env, what string) {
	e.t.Helper()
	ctx, cancel := withTimeout(e.ctx, e.target)
	defer cancel()
	for {
		// The signals are taken before counting: a connection linked in
		// between wakes the wait.
		cons := ls.cons.nextLink()
		prod := cons
		if ls.prod != nil {
			prod = ls.prod.nextLink()
		}
		missed := ls.missed(ls.live())
		if missed == "" {
			return
		}
		select {
		case <-cons:
		case <-prod:
		case <-ctx.Done():
			e.t.Fatalf("%s would have %s; no more connections came within %v", what, missed, e.target.Timeout)
		}
	}
}

// mustHaveHit fails the scenario unless fault (what) hit at least one
// connection of the producer and one of the consumer: a fault that hit
// nothing (an adapter that bypassed the proxy, an address rewrite that
// broke) proves nothing. On a shared proxy it needs two connections, as
// it cannot tell whose they are; a producer connected directly is not
// counted (ls.direct says why).
func (ls links) mustHaveHit(e *env, what string, h hits) {
	e.t.Helper()
	if err := ls.missed(h); err != "" {
		e.t.Fatalf("%s %s", what, err)
	}
	if ls.shared {
		e.t.Logf("%s hit %d connection(s) of the broker's own proxy, which carries the producer's and the consumer's alike", what, h.cons)
	}
}

// missed says how a fault missed a process, or "".
func (ls links) missed(h hits) string {
	switch {
	case ls.shared && h.cons < 2:
		return fmt.Sprintf("hit %d connection(s) of the broker's proxy, fewer than the producer's and the consumer's: the fault proves nothing", h.cons)
	case ls.shared:
		return ""
	case h.cons == 0:
		return "hit no connection of the consumer: it does not talk to the broker through the proxy, so the fault proves nothing"
	case ls.direct == "" && h.prod == 0:
		return "hit no connection of the producer: it does not talk to the broker through the proxy, so the fault proves nothing"
	}
	return ""
}
