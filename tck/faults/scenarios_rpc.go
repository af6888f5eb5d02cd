package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/flow/rpc"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// The rpc scenarios check flow/rpc replies across broker faults: a reply
// whose publish the broker confirmed (the replier's Send returned nil,
// after which Serve acks the request) must reach the client, as every
// confirmed publish must reach its consumer. A client process calls
// steadily before, during and after the fault, retrying a call that got
// no reply; a replier process serves the requests with rpc.Serve over a
// LoadBalance subscription of the request topic. The kit records every
// reply the replier's Send confirmed (by correlation id) and every reply
// that reached the client's reply pipeline (a flow observer given
// through rpc.ClientOptions.Flow: answered, late or duplicate, it
// arrived), and the ledger follows the requests themselves (sent through
// tck.Ledger.Send, settled by the replier's pipeline). The scenario
// passes only if every confirmed reply arrived, every call was answered
// and every confirmed request was settled; it logs one RPC line:
//
//	RPC <target> <scenario> calls=N attempts=N replied-confirmed=N arrived=N lost=0 retried=N ...
const (
	rpcCallers = 4  // goroutines calling at once
	rpcBefore  = 60 // calls answered before the fault
	rpcAfter   = 40 // calls started after the fault healed, answered, before the callers stop
	rpcHeld    = 2  // requests the replier holds across the fault's start
	rpcPace    = 40 * time.Millisecond
	// rpcBackoffMax bounds the pause between the attempts of a call.
	rpcBackoffMax = time.Second
)

func init() {
	register("rpc-restart", restarts("rpc-restart", "the client and the replier while they send"), scenarioRPCRestart)
	register("rpc-reset", networked, scenarioRPCReset)
	// Both stop the client's reply subscription, a Broadcast one.
	for i := range scenarios {
		if n := scenarios[i].name; n == "rpc-restart" || n == "rpc-reset" {
			scenarios[i].broadcast = true
		}
	}
}

// rpcReq is a request of the rpc scenarios; the reply echoes N.
type rpcReq struct {
	N int `json:"n"`
}

type rpcResp struct {
	N int `json:"n"`
}

// rpcProc is one process of the rpc scenarios: the adapter it subscribes
// with and the sender it publishes with (the same adapter, except under
// -race on a target with a ClientRace, where publishes go over a direct
// connection that the fault does not touch).
type rpcProc struct {
	sub  ports.Adapter
	send ports.Sender
}

// rpcAdapter is the client's adapter: it subscribes with sub and sends
// its requests through the ledger (tck.Ledger.Send) over send.
type rpcAdapter struct {
	ports.Adapter
	send ports.Sender
	l    *tck.Ledger
}

func (a rpcAdapter) Send(ctx context.Context, msgs ...ports.Message) error {
	return a.l.Send(ctx, a.send, msgs...)
}

// replySender is the replier's replies Sender: it records, by correlation
// id, every reply whose publish was confirmed.
type replySender struct {
	s ports.Sender
	r *rpcRun
}

func (s replySender) Send(ctx context.Context, msgs ...ports.Message) error {
	err := s.s.Send(ctx, msgs...)
	failed := tck.UnconfirmedIndexes(err, len(msgs))
	for i, m := range msgs {
		if !failed[i] {
			s.r.confirmed(m.Headers.Get(rpc.HeaderCorrelation))
		}
	}
	return err
}

// rpcRun is the state of one rpc scenario.
type rpcRun struct {
	e      *env
	client *rpc.Client[rpcReq, rpcResp]
	p      *flow.Pipeline // the replier's; nil once stopped (guarded by mu)

	quit    chan struct{} // closed: the callers stop
	done    chan struct{} // closed when every caller returned
	release []chan struct{}

	mu          sync.Mutex
	changed     chan struct{}    // closed and replaced on every change
	replied     map[string]int   // correlation id → confirmed replies
	arrivals    map[string]int   // correlation id → replies that reached the client
	calls       int              // logical calls started
	attempts    int              // Call invocations
	retried     int              // Call invocations that got no reply (retried, or the last)
	answered    int              // logical calls answered
	open        map[int][]string // logical calls not answered yet → their correlation ids
	holding     bool             // the replier holds the next requests (up to rpcHeld)
	held        int
	healedAt    time.Time // zero until the fault healed
	afterHeal   int       // calls started after healedAt and answered
	spans       []span    // of the calls' attempts
	callerErr   error
	servers     []*rpc.Server // the replier's, one per (re)start
	wrongAnswer string
}

func newRPCRun(e *env) *rpcRun {
	r := &rpcRun{
		e: e, quit: make(chan struct{}), done: make(chan struct{}),
		changed: make(chan struct{}),
		replied: map[string]int{}, arrivals: map[string]int{}, open: map[int][]string{},
	}
	for range rpcHeld {
		r.release = append(r.release, make(chan struct{}))
	}
	return r
}

// notifyLocked wakes every waiter; r.mu must be held.
func (r *rpcRun) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *rpcRun) confirmed(corr string) {
	if corr == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replied[corr]++
	r.notifyLocked()
}

func (r *rpcRun) arrived(ev flow.Event) {
	if !ev.Received || ev.Delivery == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.arrivals[ev.Delivery.Headers.Get(rpc.HeaderCorrelation)]++
	r.notifyLocked()
}

// await waits, at most bound, until cond holds (r.mu held while it is
// evaluated); it returns whether it did.
func (r *rpcRun) await(bound time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, ch := cond(), r.changed
		r.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		case <-r.e.ctx.Done():
			return false
		}
	}
}

// mustAwait is await failing the scenario with what it waited for.
func (r *rpcRun) mustAwait(what string, cond func() bool) {
	r.e.t.Helper()
	if !r.await(r.e.target.Timeout, cond) {
		r.e.t.Fatalf("rpc: no %s within %v: %s", what, r.e.target.Timeout, r)
	}
}

// lostLocked returns the correlation ids of confirmed replies that never
// reached the client, sorted; r.mu must be held.
func (r *rpcRun) lostLocked() []string {
	var lost []string
	for id := range r.replied {
		if r.arrivals[id] == 0 {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	return lost
}

// String is the scenario's RPC line.
func (r *rpcRun) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	arrived := 0
	for id := range r.replied {
		if r.arrivals[id] > 0 {
			arrived++
		}
	}
	s := fmt.Sprintf("RPC %s %s calls=%d attempts=%d replied-confirmed=%d arrived=%d lost=%d retried=%d answered=%d unanswered=%d",
		r.e.target.Name, r.e.fault, r.calls, r.attempts, len(r.replied), arrived, len(r.replied)-arrived, r.retried, r.answered, len(r.open))
	if r.client != nil {
		st := r.client.Stats()
		s += fmt.Sprintf(" client{answered=%d late=%d duplicate=%d unknown=%d timed-out=%d}", st.Answered, st.Late, st.Duplicate, st.Unknown, st.TimedOut)
	}
	if len(r.servers) > 0 {
		var st rpc.ServerStats
		for _, sv := range r.servers {
			x := sv.Stats()
			st.Replied += x.Replied
			st.Expired += x.Expired
			st.Orphaned += x.Orphaned
			st.Rejected += x.Rejected
			st.Failed += x.Failed
		}
		s += fmt.Sprintf(" server{replied=%d expired=%d orphaned=%d rejected=%d failed=%d}", st.Replied, st.Expired, st.Orphaned, st.Rejected, st.Failed)
	}
	return s
}

// rpcProcesses makes the client and the replier process of an rpc
// scenario: connected directly (proxy false) or each through its own
// proxy (ls.prod in front of the client, ls.cons in front of the
// replier). Under -race on a target with a ClientRace both publish over
// direct connections and only their subscriptions go through the proxy
// (ls.cons), as the stream's producers do.
func (e *env) rpcProcesses(proxy bool) (ls links, client, replier rpcProc) {
	one := func(a ports.Adapter) rpcProc { return rpcProc{sub: a, send: a} }
	switch {
	case !proxy:
		return ls, one(e.adapter()), one(e.adapter())
	case e.b.Proxy != nil: // every connection goes through it anyway
		ls = links{prod: e.b.Proxy, cons: e.b.Proxy, shared: true}
		return ls, one(e.adapter()), one(e.adapter())
	}
	ls.cons = e.proxy()
	if raceEnabled && e.target.ClientRace != "" {
		ls.direct = "under -race a process reconnecting while it sends triggers " + e.target.ClientRace
		e.t.Logf("only the subscriptions of the client and the replier go through the faulted proxy, their publishes go directly: %s", ls.direct)
		client = rpcProc{sub: e.dial(ls.cons.Addr()), send: e.adapter()}
		replier = rpcProc{sub: e.dial(ls.cons.Addr()), send: e.adapter()}
		return ls, client, replier
	}
	ls.prod = e.proxy()
	e.t.Logf("the client process goes through one proxy (the \"producer\" below), the replier process through another (the \"consumer\")")
	return ls, one(e.dial(ls.prod.Addr())), one(e.dial(ls.cons.Addr()))
}

// rpc runs the rpc check around fault, which is called once rpcBefore
// calls were answered and rpcHeld requests are held by the replier; it
// calls hold(i) to let the i-th held request be answered (each once,
// the kit releases the rest when fault returns) and returns once the
// fault healed.
func (e *env) rpc(client, replier rpcProc, fault func(release func(i int))) {
	e.t.Helper()
	r := newRPCRun(e)
	var relOnce [rpcHeld]sync.Once
	release := func(i int) { relOnce[i].Do(func() { close(r.release[i]) }) }
	e.t.Cleanup(func() {
		for i := range rpcHeld {
			release(i)
		}
	})
	if !client.sub.Capabilities().Broadcast {
		e.t.Skipf("SKIP %s/%s: the adapter has no Broadcast subscriptions, which an rpc client's reply topic needs", e.target.Name, e.fault)
	}
	r.startReplier(replier)
	r.startClient(client)
	r.startCallers()

	r.mustAwait(fmt.Sprintf("%d calls answered before the fault", rpcBefore), func() bool { return r.answered >= rpcBefore })
	r.mu.Lock()
	r.holding = true
	r.mu.Unlock()
	r.mustAwait(fmt.Sprintf("%d requests held by the replier", rpcHeld), func() bool { return r.held >= rpcHeld })
	began := time.Now()
	fault(release)
	for i := range rpcHeld {
		release(i)
	}
	healed := time.Now()
	r.mu.Lock()
	r.healedAt = healed
	r.mu.Unlock()

	// The callers go on until rpcAfter calls started after the fault
	// healed were answered, then stop; every call must have been answered.
	r.mustAwait(fmt.Sprintf("%d calls started after the fault answered", rpcAfter), func() bool { return r.afterHeal >= rpcAfter || r.callerErr != nil })
	close(r.quit)
	if !r.await(2*e.target.Timeout, func() bool { return r.isDone() }) {
		r.mu.Lock()
		open := r.openSample()
		r.mu.Unlock()
		e.t.Fatalf("rpc: calls still unanswered %v after the callers were told to stop (call → correlation ids of its attempts: %v): %s",
			e.target.Timeout, open, r)
	}
	r.mu.Lock()
	cerr, wrong, open := r.callerErr, r.wrongAnswer, r.openSample()
	inFlight := 0
	for _, s := range r.spans {
		if s.start.Before(healed) && s.end.After(began) {
			inFlight++
		}
	}
	r.mu.Unlock()
	switch {
	case cerr != nil:
		e.t.Fatalf("rpc: a call failed for good: %v: %s", cerr, r)
	case wrong != "":
		e.t.Fatalf("rpc: %s: %s", wrong, r)
	case len(open) > 0:
		e.t.Fatalf("rpc: %d call(s) never got a reply (call → correlation ids of its attempts: %v): %s", len(open), open, r)
	case inFlight == 0:
		e.t.Fatalf("rpc: no call was in flight during the fault: the scenario proved nothing about replies across it: %s", r)
	}
	e.t.Logf("rpc: %d call attempt(s) in flight during the fault (%v)", inFlight, healed.Sub(began).Round(time.Millisecond))

	// Every confirmed request settled (the ledger's check at the end
	// counts one that was not as lost), then the replier stops: no reply
	// is confirmed after that.
	r.settleAll(replier)
	r.stopReplier()

	// Every reply the broker confirmed must reach the client; the wait
	// goes on for as long as replies keep arriving.
	window := min(e.target.Timeout/2, 20*time.Second)
	for {
		r.mu.Lock()
		lost, seen := len(r.lostLocked()), len(r.arrivals)
		r.mu.Unlock()
		if lost == 0 || !r.await(window, func() bool { return len(r.arrivals) > seen }) {
			break
		}
	}
	line := r.String()
	e.t.Log(line)
	r.mu.Lock()
	lost := r.lostLocked()
	r.mu.Unlock()
	if len(lost) > 0 {
		e.t.Fatalf("rpc: %d reply(ies) the broker confirmed (the replier's Send returned nil for it) never reached the client, correlation ids %v: %s",
			len(lost), lost[:min(len(lost), 20)], line)
	}
	if st := r.client.Stats(); st.Unknown > 0 {
		e.t.Fatalf("rpc: the client discarded %d reply(ies) to no call of its own: %s", st.Unknown, line)
	}
}

// settleAll waits until every confirmed request was settled. If some are
// still unsettled once settlements stopped, it restarts the replier
// process, as an operator would (settleAll does the same to the stream's
// consumers): a request the adapter left unsettled must then be
// redelivered. A request still unsettled after that fails the scenario
// (and is lost in its LEDGER line), without ending it.
func (r *rpcRun) settleAll(replier rpcProc) {
	e := r.e
	e.t.Helper()
	err := e.settleRestarting("replier-restart", "the replier", "request(s)", func() {
		r.stopReplier()
		e.mu.Lock()
		identity := e.procs[replier.sub].identity
		e.mu.Unlock()
		a := e.dialAs(e.b.Addr, identity)
		r.startReplier(rpcProc{sub: a, send: a})
	})
	if err != nil {
		// The ledger's check at the end names them as lost; the replies
		// are checked all the same.
		e.t.Errorf("rpc: confirmed requests still unsettled after restarting the replier: %v", err)
	}
}

func (r *rpcRun) isDone() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// openSample lists up to 10 unanswered calls; r.mu must be held.
func (r *rpcRun) openSample() map[int][]string {
	out := map[int][]string{}
	for n, ids := range r.open {
		if len(out) == 10 {
			break
		}
		out[n] = ids
	}
	return out
}

// startReplier serves the scenario's topic: a flow pipeline of a
// LoadBalance subscription whose terminal stage is rpc.Serve, replying
// through a replySender. Its handler holds the first rpcHeld requests
// it gets once r.holding is set, each until released.
func (r *rpcRun) startReplier(proc rpcProc) {
	e := r.e
	spec := e.spec()
	// Requests redelivered across a long outage must not run out of
	// attempts: a dead-lettered request is a call the client retries,
	// which would hide nothing but slows the scenario down.
	spec.Retry.MaxAttempts = 50
	p := flow.New(proc.sub, spec, e.l.Observer(), flow.WithErrorHandler(e.onError), flow.WithDrainTimeout(2*time.Second), flow.WithSettleTimeout(10*time.Second))
	server := rpc.Serve(p.Source(), replySender{s: proc.send, r: r}, func(ctx context.Context, req rpcReq) (rpcResp, error) {
		r.mu.Lock()
		slot := -1
		if r.holding && r.held < rpcHeld {
			slot = r.held
			r.held++
			r.notifyLocked()
		}
		r.mu.Unlock()
		if slot >= 0 {
			select {
			case <-r.release[slot]:
			case <-ctx.Done():
				return rpcResp{}, ctx.Err()
			}
		}
		return rpcResp(req), nil
	}, flow.Workers(8))
	if err := p.Start(e.ctx); err != nil {
		e.t.Fatalf("rpc: starting the replier: %v", err)
	}
	r.mu.Lock()
	r.p = p
	r.servers = append(r.servers, server)
	r.mu.Unlock()
	e.t.Cleanup(r.stopReplier)
}

// stopReplier stops the replier's pipeline (once).
func (r *rpcRun) stopReplier() {
	r.mu.Lock()
	p := r.p
	r.p = nil
	r.mu.Unlock()
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.e.target.Timeout)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		r.e.t.Logf("rpc: stopping the replier after %s: %v", r.e.fault, err)
	}
}

// startClient starts the rpc client, with a stable instance, observing
// every reply that reaches it.
func (r *rpcRun) startClient(proc rpcProc) {
	e := r.e
	a := rpcAdapter{Adapter: proc.sub, send: proc.send, l: e.l}
	r.client = rpc.NewClient[rpcReq, rpcResp](a, e.topic, rpc.ClientOptions{
		Instance: "c" + e.group,
		Timeout:  e.target.Timeout,
		Flow:     []flow.Option{flow.WithObserver(r.arrived), flow.WithErrorHandler(e.onError)},
	})
	if err := r.client.Start(e.ctx); err != nil {
		e.t.Fatalf("rpc: starting the client: %v", err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e.target.Timeout)
		defer cancel()
		if err := r.client.Close(ctx); err != nil {
			e.t.Logf("rpc: closing the client after %s: %v", e.fault, err)
		}
	})
}

// startCallers starts rpcCallers goroutines, each calling, one call at a
// time, with a pause of rpcPace between calls, until r.quit is closed.
func (r *rpcRun) startCallers() {
	var wg sync.WaitGroup
	for range rpcCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-r.quit:
					return
				default:
				}
				r.mu.Lock()
				n := r.calls
				r.calls++
				r.open[n] = nil
				r.mu.Unlock()
				if !r.call(n) {
					return
				}
				select {
				case <-time.After(rpcPace): // the pace of the calls, not synchronisation
				case <-r.quit:
					return
				case <-r.e.ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		r.mu.Lock()
		close(r.done)
		r.notifyLocked()
		r.mu.Unlock()
	}()
	r.e.t.Cleanup(func() {
		select {
		case <-r.quit:
		default:
			close(r.quit)
		}
		<-r.done
	})
}

// call makes logical call n, retrying it (a new Call, with a new
// correlation id) until it is answered; false when the caller must stop.
// A call started before r.quit was closed is finished (its retries go
// on) unless the scenario's context ends.
func (r *rpcRun) call(n int) bool {
	e := r.e
	started := time.Now()
	backoff := rpcPace
	for {
		ctx, cancel := context.WithTimeout(e.ctx, e.target.Timeout)
		s := span{start: time.Now()}
		resp, err := r.client.Call(ctx, rpcReq{N: n})
		s.end = time.Now()
		cancel()
		r.mu.Lock()
		r.attempts++
		r.spans = append(r.spans, s)
		r.mu.Unlock()
		var rerr *rpc.Error
		switch {
		case err == nil:
			r.mu.Lock()
			delete(r.open, n)
			r.answered++
			if resp.N != n && r.wrongAnswer == "" {
				r.wrongAnswer = fmt.Sprintf("call %d was answered with the reply to call %d", n, resp.N)
			}
			if !r.healedAt.IsZero() && started.After(r.healedAt) {
				r.afterHeal++
			}
			r.notifyLocked()
			r.mu.Unlock()
			return true
		case e.ctx.Err() != nil:
			return false
		case errors.As(err, &rerr), errors.Is(err, ports.ErrClosed), errors.Is(err, ports.ErrInvalid):
			r.mu.Lock()
			if r.callerErr == nil {
				r.callerErr = fmt.Errorf("call %d: %w", n, err)
			}
			r.notifyLocked()
			r.mu.Unlock()
			return false
		}
		var nr *rpc.NoReplyError
		r.mu.Lock()
		r.retried++
		if errors.As(err, &nr) {
			r.open[n] = append(r.open[n], nr.ID)
		} else {
			r.open[n] = append(r.open[n], "unsent: "+err.Error())
		}
		r.mu.Unlock()
		select {
		case <-time.After(backoff): // retry pacing
		case <-e.ctx.Done():
			return false
		}
		backoff = min(2*backoff, rpcBackoffMax)
	}
}

// rpc-restart: the broker restarts while the client calls; the replier
// holds two requests across the restart's start, answering one while the
// broker restarts and one after it served again.
func scenarioRPCRestart(e *env) {
	if e.b.RestartNote != "" {
		e.t.Logf("rpc-restart on %s: %s", e.target.Name, e.b.RestartNote)
	}
	_, client, replier := e.rpcProcesses(false)
	e.rpc(client, replier, func(release func(int)) {
		f := e.begin("restart")
		defer e.heal(f)
		go release(0) // answered while the broker restarts
		e.restartBroker()
	})
}

// rpc-reset: every connection of the client and of the replier is reset
// (TCP RST) while the client calls; the replier answers its held
// requests right after the reset, on connections being re-established.
func scenarioRPCReset(e *env) {
	ls, client, replier := e.rpcProcesses(true)
	e.rpc(client, replier, func(release func(int)) {
		f := e.begin("reset")
		cut := ls.reset()
		release(0)
		e.heal(f)
		ls.mustHaveHit(e, "the reset", cut)
		e.t.Logf("reset %s", cut)
	})
}
