package mem_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

func TestStopReturnsUnsettledInOrderAndAcksNothing(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "1", "2", "3", "4", "5")
	ds := receive(t, s, 4)
	settle(t, s, ack, ds[1])
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, open := <-s.Errors(); open {
		t.Fatal("Errors() not closed after Stop")
	}
	if q := queueStats(t, b, "orders", "g"); q.Ready != 4 || q.InFlight != 0 || q.Consumers != 0 {
		t.Fatalf("stats after Stop %+v, want 4 ready, none in flight, no consumer", q)
	}

	s2 := subscribe(t, newAdapter(t, b), lb("orders", "g"))
	got := receive(t, s2, 4)
	if p := payloads(got); !slices.Equal(p, []string{"1", "3", "4", "5"}) {
		t.Fatalf("after Stop got %v, want the unsettled in delivery order, then the rest", p)
	}
	for i, want := range []int{1, 1, 1, 0} {
		if got[i].RedeliveryCount != want {
			t.Errorf("%s: RedeliveryCount = %d, want %d", got[i].Payload, got[i].RedeliveryCount, want)
		}
	}
}

func TestAdapterCloseStopsSubscriptions(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "x")
	receive(t, s, 1)
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, open := <-s.Errors(); open {
		t.Fatal("subscription still running after adapter Close")
	}
	if q := queueStats(t, b, "orders", "g"); q.Ready != 1 || q.Consumers != 0 {
		t.Fatalf("stats %+v, want the in-flight message back", q)
	}
}

func TestDurableGroupKeepsBacklog(t *testing.T) {
	b := newBroker(t)
	sender := newAdapter(t, b)
	s := subscribe(t, newAdapter(t, b), lb("orders", "g"))
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	send(t, sender, "orders", "1", "2", "3") // the whole group is down
	s2 := subscribe(t, newAdapter(t, b), lb("orders", "g"))
	if got := payloads(receive(t, s2, 3)); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("got %v", got)
	}
}

func TestKeyFilterRoutesNatively(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	spec := lb("telemetry", "g")
	spec.KeyFilter = "device-*"
	s := subscribe(t, a, spec)
	all := subscribe(t, a, lb("telemetry", "all"))
	if err := a.Send(context.Background(),
		ports.Message{Topic: "telemetry", Key: "device-1", Payload: []byte("a")},
		ports.Message{Topic: "telemetry", Key: "gateway-1", Payload: []byte("b")},
		ports.Message{Topic: "telemetry", Payload: []byte("c")},
		ports.Message{Topic: "telemetry", Key: "device-2", Payload: []byte("d")},
	); err != nil {
		t.Fatal(err)
	}
	if q := queueStats(t, b, "telemetry", "g"); q.Ready != 2 || q.KeyFilter != "device-*" {
		t.Fatalf("filtered queue %+v, want 2 ready", q)
	}
	filtered := receive(t, s, 2)
	if got := payloads(filtered); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("filtered got %v, want [a d]", got)
	}
	settle(t, s, ack, filtered...)
	if q := queueStats(t, b, "telemetry", "all"); q.Ready != 4 {
		t.Fatalf("unfiltered queue %+v, want 4 ready", q)
	}
	receive(t, all, 4)

	// The filter belongs to the queue: a running group refuses another one.
	other := spec
	other.KeyFilter = "gateway-*"
	if _, err := newAdapter(t, b).Subscribe(context.Background(), other); err == nil {
		t.Fatal("a second filter was accepted while the group runs with another one")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := subscribe(t, a, other) // with no consumer left, it may change
	if err := a.Send(context.Background(), ports.Message{Topic: "telemetry", Key: "gateway-9"}); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, s2, 1)[0]; d.Key != "gateway-9" {
		t.Fatalf("got key %q, want gateway-9", d.Key)
	}
}

func TestNamespacesAreIsolated(t *testing.T) {
	b := newBroker(t)
	blue := newAdapter(t, b, mem.WithNamespace("blue"))
	green := newAdapter(t, b, mem.WithNamespace("green"))
	sb := subscribe(t, blue, lb("orders", "g"))
	sg := subscribe(t, green, lb("orders", "g"))
	send(t, blue, "orders", "for-blue")
	if got := payloads(receive(t, sb, 1)); got[0] != "for-blue" {
		t.Fatalf("blue got %v", got)
	}
	if q, _ := b.Stats().Queue("green", "orders", "g", ""); q.Ready != 0 {
		t.Fatalf("green queue got a blue message: %+v", q)
	}
	receiveBlocked(t, sg)
}
