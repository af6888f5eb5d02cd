package tck

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func init() {
	register(4, "Delay_NotDeliveredBeforeDeadline", always, caseDelay)
	register(9, "Backpressure_InFlightNeverExceedsLimit", always, caseBackpressure)
	register(12, "InstanceTTL_IdleSubscriptionRemoved", func(c ports.Capabilities) string {
		switch {
		case !c.Broadcast:
			return "declares no Broadcast capability"
		case !c.SubscriptionExpiry:
			return "declares no SubscriptionExpiry capability"
		}
		return ""
	}, caseInstanceTTL)
	register(13, "LoadBalance_BacklogKeptWhileGroupDown", func(c ports.Capabilities) string {
		if !c.DurableGroups {
			return "declares no DurableGroups capability"
		}
		return ""
	}, caseBacklog)
	register(14, "Stop_PendingCompletionRedeliveredToNextConsumer", always, casePendingRedelivered)
	register(16, "Stop_WaitsOrCancelsAndNeverAcks", always, caseStopNeverAcks)
}

// 4. delay: not delivered before the deadline, delivered after.
func caseDelay(k *kit) {
	c := k.consume(k.first, k.spec(), nil)
	m, err := flow.NewMessage(k.ctx, k.topic, payload{N: 1})
	if err != nil {
		k.t.Fatal(err)
	}
	m.Delay = k.opts.Delay
	sent := time.Now()
	if err := k.first.Send(k.ctx, m); err != nil {
		k.t.Fatalf("Send with delay: %v", err)
	}
	r := c.next("the delayed message")
	if early := r.at.Sub(sent); early < k.opts.Delay {
		k.t.Fatalf("delivered %v after send, before its %v delay", early, k.opts.Delay)
	}
	k.t.Logf("delay %v, delivered after %v", k.opts.Delay, r.at.Sub(sent).Round(time.Millisecond))
}

// 9. backpressure: in flight never exceeds the limit; nothing lost under a
// slow handler. The kit counts what the adapter hands out (deliveries
// returned by Receive and not yet settled), not only what the handlers
// hold, and runs four times as many handler goroutines as the limit, so
// an adapter or a core that lets more in would be seen.
func caseBackpressure(k *kit) {
	const limit, n = 3, 30
	sp := k.spec()
	sp.InFlight = limit
	counted := &handedOut{Adapter: k.first}
	var cur, peak atomic.Int32
	c := k.consumeOn(counted, sp, 4*limit, func(ctx context.Context, _ *ports.Delivery) error {
		now := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if now <= p || peak.CompareAndSwap(p, now) {
				break
			}
		}
		select { // a slow handler, not synchronisation
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	})
	sent := k.send(k.first, n)
	got := ids(c.collect(n, "messages under a slow handler"))
	for _, id := range sent {
		if got[id] < 1 {
			k.t.Fatalf("message %s lost under backpressure", id)
		}
	}
	c.waitStats("all acks", func(s flow.Stats) bool { return s.Acked == n })
	out, received, overAsk := counted.stats()
	if overAsk > 0 {
		k.t.Fatalf("Receive returned more deliveries than asked for %d time(s)", overAsk)
	}
	if out > limit {
		k.t.Fatalf("the adapter handed out %d deliveries not yet settled at once, in-flight limit %d", out, limit)
	}
	if p := peak.Load(); p > limit {
		k.t.Fatalf("%d handlers ran at once, in-flight limit %d", p, limit)
	}
	if received < n {
		k.t.Fatalf("the counting wrapper saw %d deliveries of %d: it did not measure the subscription", received, n)
	}
	k.t.Logf("peak %d deliveries handed out and %d handlers at once (limit %d, %d handler goroutines)", out, peak.Load(), limit, 4*limit)
}

// 12. instance TTL: an idle per-instance subscription is removed after TTL.
func caseInstanceTTL(k *kit) {
	ttl := k.opts.InstanceTTL
	sp := k.spec()
	sp.Mode = ports.Broadcast
	sp.Instance = "inst-" + randHex(3)
	sp.InstanceTTL = ttl

	c := k.consume(k.first, sp, nil)
	c.stop()
	kept := k.send(k.first, 1)[0] // published while the instance is down, within its TTL
	c = k.consume(k.adapter(), sp, nil)
	if r := c.next("the message kept for the idle instance within its TTL"); r.d.ID != kept {
		k.t.Fatalf("got %s, want %s", r.d.ID, kept)
	}
	c.waitStats("its ack", func(s flow.Stats) bool { return s.Acked == 1 })
	c.stop()

	time.Sleep(3 * ttl)             // the subject of this case is expiry after the TTL
	lost := k.sendUnrouted(k.first) // may be refused: ports.ErrNoSubscriber
	c = k.consume(k.adapter(), sp, nil)
	fresh := k.send(k.first, 1)[0]
	r := c.next("a message sent after the instance resubscribed")
	if r.d.ID == lost {
		k.t.Fatalf("message %s, published after the instance expired, was kept: the subscription was not removed after its %v TTL", lost, ttl)
	}
	if r.d.ID != fresh {
		k.t.Fatalf("got %s, want %s", r.d.ID, fresh)
	}
}

// 13. LOAD_BALANCE with no live instance: messages published while the whole
// group is down are delivered when an instance starts.
func caseBacklog(k *kit) {
	c := k.consume(k.first, k.spec(), nil)
	c.stop() // the group exists and has no live instance
	sent := k.send(k.first, 5)
	c = k.consume(k.adapter(), k.spec(), nil)
	got := ids(c.collect(len(sent), "the backlog published while the group was down"))
	for _, id := range sent {
		if got[id] != 1 {
			k.t.Fatalf("backlog message %s delivered %d times, want 1", id, got[id])
		}
	}
}

// 14. completion pending → stop consumer → a new consumer in the same group
// gets the message again (no ack happened).
func casePendingRedelivered(k *kit) {
	block := make(chan struct{})
	defer close(block)
	c := k.consume(k.first, k.spec(), func(ctx context.Context, _ *ports.Delivery) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	id := k.send(k.first, 1)[0]
	c.next("the message whose completion stays pending")
	c.stop()
	if s := c.p.Stats(); s.Acked != 0 {
		k.t.Fatalf("stats after stop %+v: a pending completion was acked", s)
	}
	again := k.consume(k.adapter(), k.spec(), nil)
	if r := again.next("the unacked message on the next consumer"); r.d.ID != id {
		k.t.Fatalf("got %s, want %s", r.d.ID, id)
	}
}

// 16. stop waits for or cancels in-flight work; stop issues no ack.
func caseStopNeverAcks(k *kit) {
	const n = 4
	sp := k.spec()
	entered := make(chan struct{}, n)
	p := flow.New(k.first, sp, flow.WithDrainTimeout(0))
	var finished atomic.Int32
	flow.Sink(p.Source(), func(ctx context.Context, _ *ports.Delivery) error {
		entered <- struct{}{}
		<-ctx.Done() // only stop ends this work
		finished.Add(1)
		return nil // a "success" after cancellation must not be acked
	}, flow.Workers(n))
	if err := p.Start(k.ctx); err != nil {
		k.t.Fatal(err)
	}
	sent := k.send(k.first, n)
	for i := range n {
		select {
		case <-entered:
		case <-time.After(k.opts.Timeout):
			k.t.Fatalf("only %d of %d handlers started", i, n)
		}
	}
	stopped := make(chan struct{})
	go func() { stopNow(k, p); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(k.opts.Timeout):
		k.t.Fatalf("Stop did not return within %v", k.opts.Timeout)
	}
	if finished.Load() != n {
		k.t.Fatalf("Stop returned with %d of %d handlers still running", n-finished.Load(), n)
	}
	if s := p.Stats(); s.Acked+s.Requeued+s.DeadLettered != 0 {
		k.t.Fatalf("stats after stop %+v: stop settled in-flight work", s)
	}
	again := k.consume(k.adapter(), sp, nil)
	got := ids(again.collect(n, "the in-flight messages after stop"))
	for _, id := range sent {
		if got[id] != 1 {
			k.t.Fatalf("message %s redelivered %d times after stop, want 1", id, got[id])
		}
	}
}
