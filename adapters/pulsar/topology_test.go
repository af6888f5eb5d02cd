package pulsar_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	"github.com/sluicemq/sluice/ports"
)

// peerAdapter is an adapter with its own client on a fresh pulsartest.
func peerAdapter(t *testing.T, o pulsar.Options) (*pulsar.Adapter, *pulsartest.Broker) {
	t.Helper()
	b, err := pulsartest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	o.URL, o.Logger = b.URL(), quiet
	a, err := pulsar.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(ctxT(t)) })
	return a, b
}

// TestDeclareAndSubscribeRefusals: retention and max length need the
// admin API, single-active would lose the retry bound: each is refused
// with ErrUnsupported; a different redeclaration is a RedeclareError.
func TestDeclareAndSubscribeRefusals(t *testing.T) {
	a, _ := peerAdapter(t, pulsar.Options{})
	ctx := ctxT(t)
	for _, s := range []ports.TopicSpec{{Topic: "a", Retention: time.Hour}, {Topic: "b", MaxLength: 2}} {
		if err := ports.DeclareTopic(ctx, a, s); !errors.Is(err, ports.ErrUnsupported) {
			t.Errorf("DeclareTopic(%+v) = %v, want ErrUnsupported", s, err)
		}
	}
	if _, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "c", Group: "g", SingleActive: true}); !errors.Is(err, ports.ErrUnsupported) {
		t.Errorf("SingleActive: %v, want ErrUnsupported", err)
	}
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "d", Groups: []string{"g"}}); err != nil {
		t.Fatal(err)
	}
	var re *ports.RedeclareError
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "d", Groups: []string{"g", "h"}}); !errors.As(err, &re) {
		t.Errorf("redeclare with another group list: %v, want a RedeclareError", err)
	}
}

// TestScopedTopicsAreNativeTenants: "tenant/namespace/name" is the Pulsar
// topic persistent://tenant/namespace/name; a scoped topic in the
// adapter's own namespace is refused (it would be the unscoped topic).
func TestScopedTopicsAreNativeTenants(t *testing.T) {
	a, b := peerAdapter(t, pulsar.Options{Tenant: "acme", Namespace: "prod"})
	if got := a.PhysicalTopic("zeta/dev/orders"); got != "persistent://zeta/dev/orders" {
		t.Fatalf("PhysicalTopic = %q", got)
	}
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "zeta/dev/orders", Group: "g"})
	send(t, a, msg("zeta/dev/orders", "m1"))
	if d := receiveN(t, s, 1)[0]; d.ID != "m1" || d.Topic != "zeta/dev/orders" {
		t.Fatalf("got %s on %q", d.ID, d.Topic)
	}
	if st, ok := b.Topic("persistent://zeta/dev/orders"); !ok || st.Messages != 1 {
		t.Fatalf("native topic stats %+v (ok %v)", st, ok)
	}
	if err := a.Send(ctxT(t), msg("acme/prod/orders", "x")); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("scoped topic in the adapter's own namespace: %v, want ErrInvalid", err)
	}
}

// TestBestEffortIsNonPersistent: a best-effort message goes to the
// topic's non-persistent twin. Sent while no best-effort consumer exists
// it is dropped (a consumer subscribing later never gets it); a consumer
// gets what is sent once Subscribe returned (Subscribe waits until the
// broker has the consumer's permits); at-least-once subscribers of the
// topic see none of it.
func TestBestEffortIsNonPersistent(t *testing.T) {
	a, b := peerAdapter(t, pulsar.Options{})
	q1 := subscribe(t, a, ports.SubscriptionSpec{Topic: "ticks", Group: "durable"})
	lost := msg("ticks", "lost")
	lost.QoS = ports.BestEffort
	send(t, a, lost)
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "ticks", Group: "g", QoS: ports.BestEffort, Start: ports.StartEarliest})
	fresh := msg("ticks", "fresh")
	fresh.QoS = ports.BestEffort
	send(t, a, fresh)
	d := receiveN(t, s, 1)[0]
	if d.ID != "fresh" {
		t.Fatalf("best-effort consumer got %s first, want only fresh", d.ID)
	}
	// A requeue of a best-effort delivery drops it: nothing comes back.
	if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatal(err)
	}
	receiveNone(t, s, 200*time.Millisecond)
	receiveNone(t, q1, 100*time.Millisecond)
	if st, ok := b.Subscription("non-persistent://public/default/ticks", "g"); !ok || st.Backlog != 0 {
		t.Fatalf("non-persistent subscription %+v (ok %v): nothing is stored", st, ok)
	}
	if st, ok := b.Topic("persistent://public/default/ticks"); ok && st.Messages != 0 {
		t.Fatalf("the persistent topic stored %d best-effort messages", st.Messages)
	}
}

// TestExistingNamesValidated: adopted names must be full persistent topic
// names, each adopted once.
func TestExistingNamesValidated(t *testing.T) {
	for _, e := range [][]pulsar.Existing{
		{{Topic: "a", Physical: "orders"}},
		{{Topic: "a", Physical: "persistent://t/ns/x"}, {Topic: "b", Physical: "persistent://t/ns/x"}},
		{{Topic: "a", Physical: "persistent://t/ns/x", Subscriptions: map[string]string{"g": ""}}},
	} {
		if _, err := pulsar.New(context.Background(), pulsar.Options{Existing: e}); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("New(%+v): %v, want ErrInvalid", e, err)
		}
	}
}
