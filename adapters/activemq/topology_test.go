package activemq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/ports"
)

func recvOne(t *testing.T, ctx context.Context, sub ports.Subscription, what string) *ports.Delivery {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	ds, err := sub.Receive(rctx, 1)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return ds[0]
}

func ack(t *testing.T, ctx context.Context, sub ports.Subscription, d *ports.Delivery) {
	t.Helper()
	if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

func nothing(t *testing.T, sub ports.Subscription, window time.Duration, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	if ds, err := sub.Receive(ctx, 1); err == nil {
		t.Fatalf("%s: got %q", what, ds[0].Payload)
	}
}

func mustSubscribe(t *testing.T, ctx context.Context, a ports.Adapter, spec ports.SubscriptionSpec) ports.Subscription {
	t.Helper()
	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })
	return sub
}

// TestDeclareTopicRecordsAndRefuses: the same declaration twice is a
// no-op, another is a RedeclareError naming the difference; MaxLength,
// StartEarliest and an oversized payload are refused before the broker.
func TestDeclareTopicRecordsAndRefuses(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := ports.TopicSpec{Topic: "events", Retention: time.Minute}
	for range 2 {
		if err := ports.DeclareTopic(ctx, a, spec); err != nil {
			t.Fatal(err)
		}
	}
	var re *ports.RedeclareError
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "events"}); !errors.As(err, &re) || !strings.Contains(err.Error(), "Retention") {
		t.Fatalf("redeclare without retention: %v, want a RedeclareError naming Retention", err)
	}
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "capped", MaxLength: 5}); !errors.Is(err, ports.ErrUnsupported) {
		t.Errorf("MaxLength: %v, want ErrUnsupported", err)
	}
	if _, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "events", Group: "g", Start: ports.StartEarliest}); !errors.Is(err, ports.ErrUnsupported) {
		t.Errorf("StartEarliest: %v, want ErrUnsupported", err)
	}
	err := a.Send(ctx, ports.Message{Topic: "events", Payload: make([]byte, activemq.MaxMessageBytes+1)})
	var se *ports.SizeError
	if !errors.As(err, &se) || !errors.Is(err, ports.ErrInvalid) || se.Limit != activemq.MaxMessageBytes {
		t.Errorf("oversized Send: %v, want a SizeError", err)
	}
	if got := a.Capabilities().MaxMessageBytes; got != activemq.MaxMessageBytes {
		t.Errorf("MaxMessageBytes %d", got)
	}
}

// TestGroupDeclaredAheadKeepsMessages: a group declared with the topic
// gets what is published before its first consumer; the declaration left
// nothing marked redelivered.
func TestGroupDeclaredAheadKeepsMessages(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "tasks", Groups: []string{"workers"}}); err != nil {
		t.Fatal(err)
	}
	keepsEarlyMessage(t, ctx, a, "tasks", "workers")
}

// keepsEarlyMessage checks that declared group of topic gets a message
// published before its first consumer, once and not marked redelivered.
func keepsEarlyMessage(t *testing.T, ctx context.Context, a ports.Adapter, topic ports.Topic, group string) {
	t.Helper()
	if err := a.Send(ctx, ports.Message{Topic: topic, Payload: []byte("early")}); err != nil {
		t.Fatal(err)
	}
	sub := mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: topic, Group: group})
	d := recvOne(t, ctx, sub, "message published before the declared group's first consumer")
	if string(d.Payload) != "early" || d.RedeliveryCount != 0 {
		t.Fatalf("got %q (redelivery count %d), want \"early\" delivered once", d.Payload, d.RedeliveryCount)
	}
	ack(t, ctx, sub, d)
}

// TestRetentionExpiresUnconsumedMessages: with a 1s retention, a message
// waiting in a declared group's queue past it is never delivered; one sent
// later is.
func TestRetentionExpiresUnconsumedMessages(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "state", Retention: time.Second, Groups: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, ports.Message{Topic: "state", Payload: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // what is tested: the message outlives its expiration
	if err := a.Send(ctx, ports.Message{Topic: "state", Payload: []byte("fresh")}); err != nil {
		t.Fatal(err)
	}
	sub := mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: "state", Group: "g"})
	d := recvOne(t, ctx, sub, "fresh message")
	if string(d.Payload) != "fresh" {
		t.Fatalf("got %q, want only %q: the expired message must not be delivered", d.Payload, "fresh")
	}
	ack(t, ctx, sub, d)
	nothing(t, sub, 500*time.Millisecond, "expired message delivered")
}

// TestSingleActiveFailsOver: two exclusive consumers of one group: every
// message goes to the first; when it stops, its unsettled delivery and the
// rest go to the second.
func TestSingleActiveFailsOver(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := ports.SubscriptionSpec{Topic: "ledger", Group: "g", SingleActive: true, InFlight: 10}
	first, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	second := mustSubscribe(t, ctx, a, spec)
	for _, p := range []string{"m1", "m2", "m3"} {
		if err := a.Send(ctx, ports.Message{Topic: "ledger", Payload: []byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"m1", "m2"} {
		d := recvOne(t, ctx, first, "active consumer")
		if string(d.Payload) != want {
			t.Fatalf("active consumer got %q, want %q in order", d.Payload, want)
		}
		ack(t, ctx, first, d)
	}
	if err := first.(ports.Flusher).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	nothing(t, second, 300*time.Millisecond, "standing-by consumer received while the active one runs")
	if err := first.Stop(ctx); err != nil { // m3 is delivered to it (prefetched) and not settled
		t.Fatal(err)
	}
	d := recvOne(t, ctx, second, "failover to the standing-by consumer")
	if string(d.Payload) != "m3" {
		t.Fatalf("after failover got %q, want m3", d.Payload)
	}
	ack(t, ctx, second, d)
}

// TestBestEffortSendsArePersistentFalse: a raw STOMP consumer of the
// group's queue sees a best-effort message as non-persistent and an
// at-least-once one as persistent.
func TestBestEffortSendsArePersistentFalse(t *testing.T) {
	ns := namespace("q0")
	a := newAdapter(t, activemq.Options{Namespace: ns})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ports.DeclareGroup(ctx, a, "ticks", "raw"); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, ports.Message{Topic: "ticks", Payload: []byte("q0"), QoS: ports.BestEffort},
		ports.Message{Topic: "ticks", Payload: []byte("q1")}); err != nil {
		t.Fatal(err)
	}
	c, err := stomp.Dial("tcp", activemqtest.Shared(t).StompAddr, rawLog)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	sub, err := c.Subscribe("/queue/Consumer.raw.VirtualTopic."+ns+".ticks", stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for len(got) < 2 {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			got[string(m.Body)] = m.Header.Get("persistent")
		case <-ctx.Done():
			t.Fatalf("raw consumer got %v", got)
		}
	}
	if got["q0"] == "true" || got["q1"] != "true" {
		t.Fatalf("persistent header: best effort %q, at least once %q", got["q0"], got["q1"])
	}
	// The deferred Disconnect ends sub (see harness.CreateExisting for why
	// not UNSUBSCRIBE).
}

// TestScopedTopicsAreIsolated: two tenants' topics of one name and the
// unscoped one are three destinations.
func TestScopedTopicsAreIsolated(t *testing.T) {
	a := newAdapter(t, activemq.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := []ports.Topic{"acme/prod/orders", "zeta/prod/orders", "orders"}
	subs := make([]ports.Subscription, len(topics))
	for i, tp := range topics {
		subs[i] = mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: tp, Group: "g"})
	}
	for range 2 {
		for _, tp := range topics {
			if err := a.Send(ctx, ports.Message{Topic: tp, Payload: []byte(tp)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, sub := range subs {
		for range 2 {
			d := recvOne(t, ctx, sub, string(topics[i]))
			if string(d.Payload) != string(topics[i]) || d.Topic != topics[i] {
				t.Errorf("subscription to %q got %q on %q", topics[i], d.Payload, d.Topic)
			}
			ack(t, ctx, sub, d)
		}
		nothing(t, sub, 200*time.Millisecond, "another tenant's message")
	}
}

// TestExistingDestinationsAdopted: a logical topic adopted onto a legacy
// queue: a raw STOMP producer's message reaches the sluice group, and
// sluice's Send lands on the legacy queue byte for byte.
func TestExistingDestinationsAdopted(t *testing.T) {
	legacy := "/queue/legacy." + namespace("orders")
	a := newAdapter(t, activemq.Options{Existing: []activemq.Existing{{Topic: "orders", Destination: legacy}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := stomp.Dial("tcp", activemqtest.Shared(t).StompAddr, rawLog)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect()
	if err := c.Send(legacy, "text/plain", []byte("from legacy"), stomp.SendOpt.Receipt); err != nil {
		t.Fatal(err)
	}
	sub := mustSubscribe(t, ctx, a, ports.SubscriptionSpec{Topic: "orders", Group: "mailer"})
	d := recvOne(t, ctx, sub, "legacy message on the adopted queue")
	if string(d.Payload) != "from legacy" || d.Topic != "orders" {
		t.Fatalf("got %q on %q", d.Payload, d.Topic)
	}
	ack(t, ctx, sub, d)
	if err := sub.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, ports.Message{Topic: "orders", Payload: []byte("from sluice")}); err != nil {
		t.Fatal(err)
	}
	rs, err := c.Subscribe(legacy, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-rs.C:
		if m.Err != nil || string(m.Body) != "from sluice" {
			t.Fatalf("legacy consumer got %q, %v", m.Body, m.Err)
		}
	case <-ctx.Done():
		t.Fatal("nothing on the legacy queue")
	}
	// rs ends with the deferred Disconnect (not UNSUBSCRIBE: see
	// harness.CreateExisting).
	if _, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders", Mode: ports.Broadcast}); !errors.Is(err, ports.ErrUnsupported) {
		t.Errorf("Broadcast of a topic adopted onto a plain queue: %v, want ErrUnsupported", err)
	}
}
