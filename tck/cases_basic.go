package tck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

func always(ports.Capabilities) string { return "" }

func init() {
	register(1, "RoundTrip_PayloadAndEnvelopeIntact", always, caseRoundTrip)
	register(2, "LoadBalance_EachMessageHandledByExactlyOneInstance", always, caseLoadBalance)
	register(3, "Broadcast_EveryInstanceGetsEveryMessage", func(c ports.Capabilities) string {
		if !c.Broadcast {
			return "declares no Broadcast capability"
		}
		return ""
	}, caseBroadcast)
	register(7, "Send_ConfirmedOutcomeReported", always, caseSendOutcome)
	register(8, "RequestID_SurvivesTheHop", always, caseRequestID)
	register(38, "ValueOnlyPipeline_HeadersReadWhereAsked", always, caseValueOnlyHeaders)
}

// 1. send → receive round trip: payload and every envelope header intact
// (a CloudEvent's too); a message that asked for no CloudEvents attributes
// arrives without them.
func caseRoundTrip(k *kit) {
	c := k.consume(k.first, k.spec(), nil)
	ctx := flow.WithTenantID(flow.WithRequestID(k.ctx, "req-1"), "tenant-1")
	m, err := flow.NewMessage(ctx, k.topic, payload{N: 7, Text: "héllo, 世界"}, flow.Key("key-1"),
		flow.CloudEvents("/tck"), flow.Type("com.example.tck.v1"),
		flow.Header(ports.HeaderCorrelationID, "corr-1"),
		flow.Header(ports.HeaderCausationID, "cause-1"),
		flow.Header(ports.HeaderTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		flow.Header("x-user", "alice"))
	if err != nil {
		k.t.Fatal(err)
	}
	m.Headers.Set(ports.HeaderID, "id-roundtrip-"+randHex(4))
	sent := m.Headers.Clone()
	if err := k.first.Send(ctx, m); err != nil {
		k.t.Fatalf("Send: %v", err)
	}
	r := c.next("the round-trip message")
	d := r.d
	var got payload
	if err := json.Unmarshal(d.Payload, &got); err != nil || got != (payload{N: 7, Text: "héllo, 世界"}) {
		k.t.Fatalf("payload %q decoded to %+v (%v), want the sent value", d.Payload, got, err)
	}
	if d.Topic != k.topic || d.Key != "key-1" || d.ID != sent.Get(ports.HeaderID) || d.RedeliveryCount != 0 {
		k.t.Fatalf("delivery topic=%q key=%q id=%q redeliveries=%d; want %q, key-1, %q, 0", d.Topic, d.Key, d.ID, d.RedeliveryCount, k.topic, sent.Get(ports.HeaderID))
	}
	for _, h := range sent {
		if got := d.Headers.Get(h.Name); got != h.Value {
			k.t.Errorf("header %s = %q, want %q", h.Name, got, h.Value)
		}
	}
	if d.Headers.Get(ports.HeaderPartitionKey) != "key-1" {
		k.t.Errorf("envelope header %s = %q after the hop, want the key", ports.HeaderPartitionKey, d.Headers.Get(ports.HeaderPartitionKey))
	}
	plain, err := flow.NewMessage(ctx, k.topic, payload{N: 8})
	if err != nil {
		k.t.Fatal(err)
	}
	if err := k.first.Send(ctx, plain); err != nil {
		k.t.Fatalf("Send: %v", err)
	}
	d = c.next("the message without CloudEvents attributes").d
	if d.ID != plain.ID() || d.Headers.Get(ports.HeaderContentType) != "application/json" {
		k.t.Errorf("delivery id %q, content type %q; want %q, application/json", d.ID, d.Headers.Get(ports.HeaderContentType), plain.ID())
	}
	for _, h := range []string{ports.HeaderSpecVersion, ports.HeaderSource, ports.HeaderTime, ports.HeaderType} {
		if v, ok := d.Headers.Lookup(h); ok {
			k.t.Errorf("header %s = %q after the hop: Send wrote an envelope header nobody asked for", h, v)
		}
	}
	c.waitStats("the acks", func(s flow.Stats) bool { return s.Acked == 2 })
}

// 2. LOAD_BALANCE over 2 instances: each message handled by exactly one.
func caseLoadBalance(k *kit) {
	const n = 40
	sp := k.spec()
	a1, a2 := k.first, k.adapter()
	c1 := k.consume(a1, sp, nil)
	c2 := k.consume(a2, sp, nil)
	sent := k.send(a1, n)
	got := map[string]int{}
	per := [2]int{}
	for len(got) < n {
		select {
		case r := <-c1.got:
			got[r.d.ID]++
			per[0]++
		case r := <-c2.got:
			got[r.d.ID]++
			per[1]++
		case <-k.ctx.Done():
			k.t.Fatalf("only %d of %d messages arrived", len(got), n)
		}
	}
	c1.waitStats("acks on instance 1", func(s flow.Stats) bool { return s.Acked == int64(per[0]) })
	c2.waitStats("acks on instance 2", func(s flow.Stats) bool { return s.Acked == int64(per[1]) })
	c1.quiet("each message must be handled by exactly one instance")
	c2.quiet("each message must be handled by exactly one instance")
	for _, id := range sent {
		if got[id] != 1 {
			k.t.Fatalf("message %s handled %d times across the group, want 1", id, got[id])
		}
	}
	k.t.Logf("split across instances: %d / %d", per[0], per[1])
}

// 3. BROADCAST: both instances get every message.
func caseBroadcast(k *kit) {
	const n = 20
	sp := k.spec()
	sp.Mode = ports.Broadcast
	c1 := k.consume(k.first, sp, nil)
	c2 := k.consume(k.adapter(), sp, nil)
	sent := k.send(k.first, n)
	for i, c := range []*consumer{c1, c2} {
		got := ids(c.collect(n, fmt.Sprintf("broadcast copies on instance %d", i+1)))
		for _, id := range sent {
			if got[id] != 1 {
				k.t.Fatalf("instance %d got message %s %d times, want 1", i+1, id, got[id])
			}
		}
	}
}

// 7. confirmed send reports the right outcome (success and failure).
func caseSendOutcome(k *kit) {
	c := k.consume(k.first, k.spec(), nil)
	if err := flow.Send(k.ctx, k.first, k.topic, payload{N: 1}); err != nil {
		k.t.Fatalf("confirmed Send returned %v", err)
	}
	c.next("the confirmed message")

	cancelled, cancel := context.WithCancel(k.ctx)
	cancel()
	if err := flow.Send(cancelled, k.first, k.topic, payload{N: 2}); !errors.Is(err, context.Canceled) {
		k.t.Fatalf("Send with a cancelled context returned %v, want context.Canceled", err)
	}
	if err := k.first.Send(k.ctx, ports.Message{Topic: "bad topic!", Payload: []byte("{}")}); !errors.Is(err, ports.ErrInvalid) {
		k.t.Fatalf("Send to an invalid topic returned %v, want ErrInvalid", err)
	}
	if f, ok := k.h.(SendFaults); ok {
		f.FailSends(true)
		err := flow.Send(k.ctx, k.first, k.topic, payload{N: 3})
		f.FailSends(false)
		if err == nil {
			k.t.Fatal("Send returned nil while the broker refused to confirm")
		}
		var se *ports.SendError
		if !errors.As(err, &se) {
			k.t.Fatalf("unconfirmed Send returned %v, want a *ports.SendError", err)
		}
	} else {
		k.t.Logf("harness has no SendFaults: unconfirmed-publish path checked only by closed adapter")
	}
	closed := k.adapter()
	if err := closed.Close(k.ctx); err != nil {
		k.t.Fatalf("Close: %v", err)
	}
	if err := flow.Send(k.ctx, closed, k.topic, payload{N: 4}); !errors.Is(err, ports.ErrClosed) {
		k.t.Fatalf("Send on a closed adapter returned %v, want ErrClosed", err)
	}
}

// 8. request id survives the hop (restored in the consumer context).
func caseRequestID(k *kit) {
	c := k.consume(k.first, k.spec(), nil)
	const n = 5
	for i := range n {
		ctx := flow.WithRequestID(k.ctx, "req-"+strconv.Itoa(i))
		if err := flow.Send(ctx, k.first, k.topic, payload{N: i}); err != nil {
			k.t.Fatal(err)
		}
	}
	for _, r := range c.collect(n, "messages with request ids") {
		var p payload
		if err := json.Unmarshal(r.d.Payload, &p); err != nil {
			k.t.Fatal(err)
		}
		if got, want := flow.RequestID(r.ctx), "req-"+strconv.Itoa(p.N); got != want {
			k.t.Fatalf("handler context request id %q, want %q", got, want)
		}
	}
}

// 38. A pipeline whose handler sees decoded values only (one whose
// deliveries the core may reuse, and whose headers a subscription may
// leave in the broker's record: ports.HeaderDeferrer) still gives each
// handler its own message's headers where it asks: its request id, and
// through flow.DeliveryFrom the delivery, read after every message was
// handled; a poison message's dead letter carries its headers.
func caseValueOnlyHeaders(k *kit) {
	const n, poison = 20, 7
	dead := k.dlq(k.first)
	var mu sync.Mutex
	reqs := map[int]string{}
	kept := map[int]*ports.Delivery{}
	p := flow.New(k.first, k.spec(), flow.WithDrainTimeout(0))
	flow.Sink(flow.Decode[payload](p.Source()), func(ctx context.Context, v payload) error {
		mu.Lock()
		defer mu.Unlock()
		reqs[v.N] = flow.RequestID(ctx)
		if v.N%4 == 0 {
			kept[v.N] = flow.DeliveryFrom(ctx)
		}
		if v.N == poison {
			return ports.Poisonf("message %d is poison", poison)
		}
		return nil
	})
	if err := p.Start(k.ctx); err != nil {
		k.t.Fatalf("starting the value-only pipeline: %v", err)
	}
	k.t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := p.Stop(ctx); err != nil && !abandoned(err) {
			k.t.Errorf("stopping the value-only pipeline: %v", err)
		}
	})
	msgs := make([]ports.Message, n)
	for i := range msgs {
		m, err := flow.NewMessage(flow.WithRequestID(k.ctx, "req-"+strconv.Itoa(i)), k.topic, payload{N: i}, flow.Header("x-n", strconv.Itoa(i)))
		if err != nil {
			k.t.Fatal(err)
		}
		msgs[i] = m
	}
	if err := k.first.Send(k.ctx, msgs...); err != nil {
		k.t.Fatalf("Send %d messages: %v", n, err)
	}
	ctx, cancel := context.WithTimeout(k.ctx, k.opts.Timeout)
	defer cancel()
	if err := p.WaitSettled(ctx, n); err != nil {
		k.t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if want := "req-" + strconv.Itoa(i); reqs[i] != want {
			k.t.Fatalf("message %d: handler context request id %q, want %q", i, reqs[i], want)
		}
		if d, ok := kept[i]; ok && (d == nil || d.Headers.Get("x-n") != strconv.Itoa(i) || d.Headers.Get(ports.HeaderRequestID) != "req-"+strconv.Itoa(i)) {
			k.t.Fatalf("message %d: the delivery kept with DeliveryFrom reads headers %v, want its own", i, d)
		}
	}
	if len(kept) != (n+3)/4 {
		k.t.Fatalf("kept %d deliveries, want %d", len(kept), (n+3)/4)
	}
	r := dead.next("the poison message's dead letter")
	if r.d.Headers.Get("x-n") != strconv.Itoa(poison) || r.d.Headers.Get(ports.HeaderRequestID) != "req-"+strconv.Itoa(poison) {
		k.t.Fatalf("dead letter headers %v, want message %d's", r.d.Headers, poison)
	}
}
