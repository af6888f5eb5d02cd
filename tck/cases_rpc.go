package tck

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/flow/rpc"
	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(30, "RequestReply", func(c ports.Capabilities) string {
		if !c.Broadcast {
			return "lacks Capabilities.Broadcast (a client's reply topic is a Broadcast subscription)"
		}
		return ""
	}, caseRequestReply)
	register(31, "BatchMemberOutcomes", always, caseBatchMemberOutcomes)
}

type rpcRequest struct {
	N    int    `json:"n"`
	Mode string `json:"mode,omitempty"` // "", "business", "slow", "crash"
}

type rpcReply struct {
	Double  int    `json:"double"`
	Replier string `json:"replier"`
}

// handledRequest is one call of a replier's handler.
type handledRequest struct {
	replier string
	req     rpcRequest
	corr    string
	count   int // the request's redelivery count
}

// replier is one replier process: an adapter and a pipeline serving the
// kit topic's requests.
type replier struct {
	a      ports.Adapter
	p      *flow.Pipeline
	server *rpc.Server
}

// 30. request/reply: a typed call gets its reply; a business error comes
// back typed; a reply after the caller stopped waiting, a duplicate and an
// unknown reply are discarded and counted; a replier that crashes before
// replying leaves the request unsettled, so it is redelivered and answered
// once by another replier.
func caseRequestReply(k *kit) {
	handled := make(chan handledRequest, 64)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseSlow := func() { releaseOnce.Do(func() { close(release) }) }
	k.t.Cleanup(releaseSlow)

	serve := func(a ports.Adapter, name string) *replier {
		p := flow.New(a, k.spec(), flow.WithDrainTimeout(0), flow.WithErrorHandler(func(error) {}))
		s := rpc.Serve(p.Source(), a, func(ctx context.Context, r rpcRequest) (rpcReply, error) {
			d := flow.DeliveryFrom(ctx)
			handled <- handledRequest{replier: name, req: r, corr: d.Headers.Get(rpc.HeaderCorrelation), count: d.RedeliveryCount}
			switch {
			case r.Mode == "business":
				return rpcReply{}, rpc.Errorf("not-found", "no order %d", r.N)
			case r.Mode == "slow":
				<-release // ignores ctx: it answers after the caller gave up
			case r.Mode == "crash" && name == "a":
				<-ctx.Done() // dies before replying
				return rpcReply{}, ctx.Err()
			}
			return rpcReply{Double: 2 * r.N, Replier: name}, nil
		}, flow.Workers(4))
		if err := p.Start(k.ctx); err != nil {
			k.t.Fatalf("starting replier %s: %v", name, err)
		}
		k.t.Cleanup(func() {
			releaseSlow() // a slow handler ignores ctx: let it return first
			stopNow(k, p)
		})
		return &replier{a: a, p: p, server: s}
	}
	nextHandled := func(what string) handledRequest {
		k.t.Helper()
		select {
		case h := <-handled:
			return h
		case <-time.After(k.opts.Timeout):
			k.t.Fatalf("timed out after %v waiting for the replier to handle %s", k.opts.Timeout, what)
		}
		return handledRequest{}
	}

	a := serve(k.adapter(), "a")
	client := rpc.NewClient[rpcRequest, rpcReply](k.first, k.topic, rpc.ClientOptions{Timeout: k.opts.Timeout})
	if err := client.Start(k.ctx); err != nil {
		k.t.Fatalf("starting the rpc client: %v", err)
	}
	k.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), k.opts.Timeout)
		defer cancel()
		if err := client.Close(ctx); err != nil {
			k.t.Errorf("closing the rpc client: %v", err)
		}
	})
	waitClient := func(what string, cond func(rpc.ClientStats) bool) {
		k.t.Helper()
		deadline := time.Now().Add(k.opts.Timeout)
		for !cond(client.Stats()) {
			if time.Now().After(deadline) {
				k.t.Fatalf("timed out after %v waiting for %s; client stats %+v", k.opts.Timeout, what, client.Stats())
			}
			time.Sleep(2 * time.Millisecond) // polling counters, bounded
		}
	}

	// A typed round trip.
	got, err := client.Call(k.ctx, rpcRequest{N: 21})
	if err != nil {
		k.t.Fatalf("Call: %v", err)
	}
	if got.Double != 42 || got.Replier != "a" {
		k.t.Fatalf("reply %+v, want {Double:42 Replier:a}", got)
	}
	first := nextHandled("the first request")
	if first.corr == "" {
		k.t.Fatalf("request arrived without %s", rpc.HeaderCorrelation)
	}

	// A business error comes back typed; the request is acked.
	_, err = client.Call(k.ctx, rpcRequest{N: 7, Mode: "business"})
	var rerr *rpc.Error
	if !errors.As(err, &rerr) || rerr.Code != "not-found" || !strings.Contains(rerr.Message, "no order 7") {
		k.t.Fatalf("Call of a failing request returned %v, want an *rpc.Error with code not-found", err)
	}
	nextHandled("the business-error request")
	waitServer := func(r *replier, what string, cond func(flow.Stats) bool) {
		k.t.Helper()
		deadline := time.Now().Add(k.opts.Timeout)
		for !cond(r.p.Stats()) {
			if time.Now().After(deadline) {
				k.t.Fatalf("timed out after %v waiting for %s; replier stats %+v, server %+v", k.opts.Timeout, what, r.p.Stats(), r.server.Stats())
			}
			time.Sleep(2 * time.Millisecond) // polling counters, bounded
		}
	}
	waitServer(a, "both requests acked", func(s flow.Stats) bool { return s.Acked == 2 })
	if s := a.p.Stats(); s.Requeued != 0 || s.DeadLettered != 0 {
		k.t.Fatalf("replier stats %+v: a reply and an error reply must ack their requests", s)
	}
	if s := a.server.Stats(); s.Replied != 2 || s.ErrorReplies != 1 {
		k.t.Fatalf("server stats %+v, want 2 replies of which 1 error reply", s)
	}

	// The caller stops waiting; the reply that comes afterwards is late.
	ctx, cancel := context.WithCancel(k.ctx)
	slow := make(chan error, 1)
	go func() {
		_, err := client.Call(ctx, rpcRequest{N: 1, Mode: "slow"})
		slow <- err
	}()
	nextHandled("the slow request")
	// The request was delivered; wait until its publish was confirmed to
	// the caller too (a broker may deliver before it confirms), so that
	// what is cancelled is the wait for the reply.
	waitClient("the slow request's publish confirmed", func(s rpc.ClientStats) bool { return s.Calls == 3 })
	cancel()
	select {
	case err := <-slow:
		var nr *rpc.NoReplyError
		if !errors.As(err, &nr) || !errors.Is(err, context.Canceled) {
			k.t.Fatalf("a call cancelled before its reply returned %v, want a *rpc.NoReplyError wrapping context.Canceled", err)
		}
	case <-time.After(k.opts.Timeout):
		k.t.Fatal("a cancelled call did not return")
	}
	releaseSlow()
	waitClient("the late reply to be discarded", func(s rpc.ClientStats) bool { return s.Late == 1 })
	// The slow request is settled before the crash below, so that what
	// the next replier gets back is the crashed request alone (an
	// unsettled slow request would come back first, as at-least-once
	// allows).
	waitServer(a, "the slow request acked", func(s flow.Stats) bool { return s.Acked == 3 })

	// A replier that crashes before replying: the request is redelivered
	// and answered once, by the replier started after the crash (on MQTT
	// only a replier of the same identity gets an unacknowledged message
	// back, so the next one starts after the crash, as a restart would).
	call := make(chan error, 1)
	var crashReply rpcReply
	go func() {
		var err error
		crashReply, err = client.Call(k.ctx, rpcRequest{N: 5, Mode: "crash"})
		call <- err
	}()
	h := nextHandled("the request the replier crashes on")
	if h.replier != "a" || h.req.Mode != "crash" {
		k.t.Fatalf("handled %+v, want replier a with the crash request", h)
	}
	// The replier dies in its handler: Stop cancels it at once (the drain
	// timeout is zero), so the request is left unsettled, while what was
	// settled before is flushed. (stopNow would also drop settlements an
	// adapter accepted and defers — a Kafka offset recorded, not yet
	// committed — and the requests they settled would come back to b as
	// legitimate at-least-once duplicates, which this case does not count.)
	sctx, scancel := context.WithTimeout(context.Background(), k.opts.Timeout)
	if err := a.p.Stop(sctx); err != nil && !abandoned(err) {
		k.t.Errorf("stopping the crashed replier: %v", err)
	}
	scancel()
	cctx, ccancel := context.WithTimeout(context.Background(), k.opts.Timeout)
	if err := a.a.Close(cctx); err != nil {
		k.t.Errorf("closing the crashed replier's adapter: %v", err)
	}
	ccancel()
	b := serve(k.adapter(), "b")
	again := nextHandled("the redelivered request")
	if again.replier != "b" || again.corr != h.corr {
		k.t.Fatalf("after the crash %s handled request %s, want replier b with %s", again.replier, again.corr, h.corr)
	}
	select {
	case err := <-call:
		if err != nil {
			k.t.Fatalf("the call whose replier crashed returned %v, want the other replier's answer", err)
		}
		if crashReply.Double != 10 || crashReply.Replier != "b" {
			k.t.Fatalf("reply %+v, want {Double:10 Replier:b}", crashReply)
		}
	case <-time.After(k.opts.Timeout):
		k.t.Fatalf("the call whose replier crashed got no answer; client stats %+v", client.Stats())
	}
	waitServer(b, "the redelivered request acked", func(s flow.Stats) bool { return s.Acked == 1 })

	// Replies to no call, and a second reply to an answered one.
	replyTo := client.ReplyTopic()
	send := func(corr string) {
		k.t.Helper()
		m, err := flow.NewMessage(k.ctx, replyTo, rpcReply{Double: -1})
		if err != nil {
			k.t.Fatal(err)
		}
		m.Headers.Set(rpc.HeaderCorrelation, corr)
		if err := k.first.Send(k.ctx, m); err != nil {
			k.t.Fatalf("sending a stray reply: %v", err)
		}
	}
	send("no-such-call")
	send(first.corr)
	waitClient("the unknown and the duplicate reply", func(s rpc.ClientStats) bool { return s.Unknown == 1 && s.Duplicate == 1 })

	// Exactly one answer per call: nothing more arrives.
	select {
	case extra := <-handled:
		k.t.Fatalf("request %+v handled again after it was answered", extra)
	case <-time.After(k.opts.Quiet):
	}
	if s := client.Stats(); s.Calls != 4 || s.Answered != 3 || s.TimedOut != 1 || s.Late != 1 || s.Duplicate != 1 || s.Unknown != 1 {
		k.t.Fatalf("client stats %+v, want 4 calls, 3 answered, 1 timed out, 1 late, 1 duplicate, 1 unknown", s)
	}
}

// 31. per-member batch outcomes: one member requeued (and acked when it
// comes back), one dead-lettered, the rest acked, each exactly once, with
// at most one Settle call per disposition of each batch.
func caseBatchMemberOutcomes(k *kit) {
	const n, size = 6, 6
	dead := k.dlq(k.first)
	sp := k.spec()
	sp.Batch = ports.BatchSpec{Size: size, Window: 200 * time.Millisecond}
	var (
		mu       sync.Mutex
		requeue  string // the member requeued on its first delivery
		bad      string // the member dead-lettered
		seen     = map[string][]int{}
		maxCalls int // at most one call per distinct disposition of each batch
	)
	p := flow.New(k.first, sp, flow.WithDrainTimeout(0))
	flow.Sink(batches(p.Source(), size, sp.Batch.Window), func(_ context.Context, b []*ports.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		var out flow.MemberOutcomes
		kinds := map[string]bool{}
		for i, d := range b {
			seen[d.ID] = append(seen[d.ID], d.RedeliveryCount)
			var v payload
			if err := json.Unmarshal(d.Payload, &v); err != nil {
				out.DeadLetter(i, err)
				kinds["dead"] = true
				continue
			}
			switch {
			case d.ID == requeue && d.RedeliveryCount == 0:
				out.Requeue(i, errors.New("shard busy"))
				kinds["requeue"] = true
			case d.ID == bad:
				out.DeadLetter(i, errors.New("unknown customer"))
				kinds["dead"] = true
			default:
				kinds["ack"] = true
			}
		}
		maxCalls += len(kinds)
		return out.Err()
	})
	if err := p.Start(k.ctx); err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { stopNow(k, p) })
	ids := make([]string, n)
	msgs := make([]ports.Message, n)
	for i := range n {
		m, err := flow.NewMessage(k.ctx, k.topic, payload{N: i})
		if err != nil {
			k.t.Fatal(err)
		}
		ids[i] = ports.NewID()
		m.Headers.Set(ports.HeaderID, ids[i])
		msgs[i] = m
	}
	mu.Lock()
	requeue, bad = ids[1], ids[2]
	mu.Unlock()
	if err := k.first.Send(k.ctx, msgs...); err != nil {
		k.t.Fatalf("Send %d messages: %v", n, err)
	}
	r := dead.next("the dead-lettered member")
	if r.d.ID != bad {
		k.t.Fatalf("dead letter carries %s, want the member named %s", r.d.ID, bad)
	}
	if reason := r.d.Headers.Get(ports.HeaderDeadLetterReason); !strings.Contains(reason, "unknown customer") {
		k.t.Fatalf("dead-letter reason %q does not carry the member's own error", reason)
	}
	deadline := time.Now().Add(k.opts.Timeout)
	for {
		s := p.Stats()
		if s.Acked == n-1 && s.Requeued == 1 && s.DeadLettered == 1 {
			break
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("timed out after %v: stats %+v, want %d acked, 1 requeued, 1 dead-lettered", k.opts.Timeout, s, n-1)
		}
		time.Sleep(2 * time.Millisecond) // polling counters, bounded
	}
	dead.quiet("the dead-lettered member must reach the dead-letter topic once")
	stopNow(k, p)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		counts := seen[id]
		want := 1
		if id == requeue {
			want = 2
		}
		if len(counts) != want {
			k.t.Fatalf("member %s handled %d times (redelivery counts %v), want %d", id, len(counts), counts, want)
		}
	}
	if c := seen[requeue]; c[1] <= c[0] {
		k.t.Fatalf("requeued member redelivered with counts %v: the count must grow", c)
	}
	if s := p.Stats(); s.SettleCalls > int64(maxCalls) {
		k.t.Fatalf("%d Settle calls, want at most %d (one per disposition of each batch)", s.SettleCalls, maxCalls)
	}
	again := k.consume(k.adapter(), k.spec(), nil)
	again.quiet("a settled batch member must not be redelivered after restart")
}
