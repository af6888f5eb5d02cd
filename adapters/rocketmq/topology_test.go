package rocketmq_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/ports"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// peerAdapter returns an adapter on a fresh peer, with a 2 s invisible
// duration and the options edit sets.
func peerAdapter(t *testing.T, edit ...func(*rocketmq.Options)) (*rocketmq.Adapter, *rocketmqtest.Broker) {
	t.Helper()
	b, err := rocketmqtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	o := rocketmq.Options{Endpoint: b.Endpoint(), InvisibleDuration: 2 * time.Second, AwaitDuration: time.Second}
	for _, e := range edit {
		e(&o)
	}
	a, err := rocketmq.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return a, b
}

func receiveOne(t *testing.T, ctx context.Context, sub ports.Subscription) *ports.Delivery {
	t.Helper()
	for {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		ds, err := sub.Receive(rctx, 1)
		cancel()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(ds) > 0 {
			return ds[0]
		}
	}
}

// TestDeclareAndSubscribeRefusals: what the v5 client cannot do is refused
// with ErrUnsupported naming why; a redeclaration with other properties is
// a RedeclareError; best effort is served at-least-once and said so.
func TestDeclareAndSubscribeRefusals(t *testing.T) {
	var logs lockedBuffer
	a, _ := peerAdapter(t, func(o *rocketmq.Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []ports.TopicSpec{{Topic: "a", Retention: time.Hour}, {Topic: "b", MaxLength: 3}} {
		if err := ports.DeclareTopic(ctx, a, s); !errors.Is(err, ports.ErrUnsupported) {
			t.Errorf("DeclareTopic(%+v) = %v, want ErrUnsupported", s, err)
		}
	}
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "d", QoS: ports.BestEffort}); err != nil {
		t.Fatal(err)
	}
	var re *ports.RedeclareError
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "d"}); !errors.As(err, &re) {
		t.Errorf("redeclare with another QoS: %v, want a RedeclareError", err)
	}
	for _, s := range []ports.SubscriptionSpec{{Topic: "d", Group: "g", Start: ports.StartEarliest}, {Topic: "d", Group: "g", SingleActive: true}} {
		if _, err := a.Subscribe(ctx, s); !errors.Is(err, ports.ErrUnsupported) {
			t.Errorf("Subscribe(%+v) = %v, want ErrUnsupported", s, err)
		}
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "d", Group: "g", QoS: ports.BestEffort})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	if !strings.Contains(logs.String(), "at-least-once") {
		t.Errorf("best-effort Subscribe did not say it falls back to at-least-once; log: %s", logs.String())
	}
}

// TestOversizedMessageRefusedBeforeTheBroker: a message above 4 MiB with
// its envelope fails with a SizeError and reaches no broker (the peer
// stores nothing); one that fits is stored.
func TestOversizedMessageRefusedBeforeTheBroker(t *testing.T) {
	a, b := peerAdapter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.CreateTopic("big")
	err := a.Send(ctx, ports.Message{Topic: "big", Payload: make([]byte, rocketmq.MaxMessageBytes)})
	var se *ports.SizeError
	if !errors.As(err, &se) || !errors.Is(err, ports.ErrInvalid) || !se.Envelope || se.Limit != rocketmq.MaxMessageBytes {
		t.Fatalf("Send of exactly 4 MiB plus headers: %v, want a SizeError counting the envelope", err)
	}
	if n := b.Stored("big"); n != 0 {
		t.Fatalf("peer stored %d messages", n)
	}
	if err := a.Send(ctx, ports.Message{Topic: "big", Payload: make([]byte, rocketmq.MaxMessageBytes-4096)}); err != nil {
		t.Fatal(err)
	}
	if n := b.Stored("big"); n != 1 {
		t.Fatalf("peer stored %d messages, want 1", n)
	}
}

// TestScopedTopicNamesAreOneToOne: a scoped topic becomes
// "tenant||namespace||name" on the broker, distinct from every unscoped
// topic and from the same name in another tenant.
func TestScopedTopicNamesAreOneToOne(t *testing.T) {
	a, b := peerAdapter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := []ports.Topic{"acme/prod/orders.paid", "zeta/prod/orders.paid", "orders.paid"}
	subs := make([]ports.Subscription, len(topics))
	for i, tp := range topics {
		sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: tp, Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Stop(context.Background())
		subs[i] = sub
		if err := a.Send(ctx, ports.Message{Topic: tp, Payload: []byte(tp)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"acme||prod||orders|paid", "zeta||prod||orders|paid", "orders|paid"} {
		if n := b.Stored(name); n != 1 {
			t.Errorf("broker topic %q holds %d messages, want 1", name, n)
		}
	}
	for i, sub := range subs {
		d := receiveOne(t, ctx, sub)
		if string(d.Payload) != string(topics[i]) || d.Topic != topics[i] {
			t.Errorf("subscription to %q got %q on %q", topics[i], d.Payload, d.Topic)
		}
		if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExistingNamesAdopted: a logical topic and group mapped to a topic
// and consumer group an administrator created: the group's backlog from
// before sluice ran is consumed, and sends land on the adopted topic.
func TestExistingNamesAdopted(t *testing.T) {
	a, b := peerAdapter(t, func(o *rocketmq.Options) {
		o.Existing = []rocketmq.Existing{{Topic: "orders", As: "LEGACY_ORDERS", Groups: map[string]string{"billing": "GID_BILLING"}}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.CreateGroup("LEGACY_ORDERS", "GID_BILLING")
	if err := a.Send(ctx, ports.Message{Topic: "orders", Payload: []byte("o1")}); err != nil {
		t.Fatal(err)
	}
	if n := b.Stored("LEGACY_ORDERS"); n != 1 {
		t.Fatalf("adopted topic holds %d messages, want 1", n)
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	d := receiveOne(t, ctx, sub)
	if string(d.Payload) != "o1" || d.Topic != "orders" {
		t.Fatalf("got %q on %q", d.Payload, d.Topic)
	}
	if err := sub.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if g := b.Groups("LEGACY_ORDERS"); len(g) != 1 || g[0] != "GID_BILLING" {
		t.Fatalf("groups on the adopted topic: %v, want only GID_BILLING", g)
	}
	// A logical topic whose derived name is the adopted one is refused.
	if err := a.Send(ctx, ports.Message{Topic: "LEGACY_ORDERS", Payload: []byte("x")}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("send to a logical topic deriving the adopted name: %v, want ErrInvalid", err)
	}
	bad := rocketmq.Options{Endpoint: b.Endpoint(), Existing: []rocketmq.Existing{{Topic: "x", As: "bad.name"}}}
	if _, err := rocketmq.New(ctx, bad); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("adopting a name RocketMQ cannot hold: %v", err)
	}
}
