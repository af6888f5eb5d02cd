package mem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/ports"
)

func TestOptionsAreValidated(t *testing.T) {
	if _, err := mem.NewBroker(mem.WithClock(nil)); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("WithClock(nil): %v, want ErrInvalid", err)
	}
	b := newBroker(t)
	for _, ns := range []string{"has space", "a/b", "ns:x", strings.Repeat("n", 101)} {
		if _, err := mem.New(b, mem.WithNamespace(ns)); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("WithNamespace(%q): %v, want ErrInvalid", ns, err)
		}
	}
	if _, err := mem.New(nil); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("New(nil): %v, want ErrInvalid", err)
	}
	a := newAdapter(t, b, mem.WithNamespace("svc-1.test_x"))
	if a.Broker() != b {
		t.Error("Broker() is not the broker the adapter was made on")
	}
}

func TestSubscribeValidatesSpec(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	for name, spec := range map[string]ports.SubscriptionSpec{
		"no topic":           {Group: "g"},
		"no group":           {Topic: "orders"},
		"bad mode":           {Topic: "orders", Group: "g", Mode: 7},
		"bad key filter":     {Topic: "orders", Group: "g", KeyFilter: "["},
		"negative in-flight": {Topic: "orders", Group: "g", InFlight: -1},
	} {
		if _, err := a.Subscribe(context.Background(), spec); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Subscribe(ctx, lb("orders", "g")); !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe with a done ctx: %v, want context.Canceled", err)
	}
	if len(b.Stats().Queues) != 0 {
		t.Error("a refused Subscribe created a queue")
	}
}

func TestCapabilitiesDeclareEverything(t *testing.T) {
	a := newAdapter(t, newBroker(t))
	want := ports.Capabilities{
		DelayedMessage: true, DelayedRequeue: true, NativeDeadLetter: true, Broadcast: true,
		PerMessageAck: true, CompetingConsumers: true, PublisherConfirm: true, NativeBatch: true, SubscriptionExpiry: true,
		DurableGroups: true, ExactRedeliveryCount: true, Ordering: ports.OrderNone,
		StartEarliest: true, SingleActive: true, BestEffort: true, Retention: true, MaxLength: true,
		MaxMessageBytes: mem.MaxMessageBytes,
		InstanceGuard:   ports.InstanceRefused,
	}
	if got := a.Capabilities(); got != want {
		t.Fatalf("Capabilities() = %v, want %v", got, want)
	}
	if a.Name() != "mem" {
		t.Fatalf("Name() = %q", a.Name())
	}
}

func TestDefaultBroker(t *testing.T) {
	if mem.Default() != mem.Default() {
		t.Fatal("Default() is not one broker")
	}
	a, err := mem.Open(mem.WithNamespace("TestDefaultBroker"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	if a.Broker() != mem.Default() {
		t.Fatal("Open does not use the default broker")
	}
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "x")
	settle(t, s, ack, receive(t, s, 1)...)
}

// TestURLMaxQueue opens mem:// with max_queue, which bounds the queues the
// adapter subscribes to, and refuses a negative bound.
func TestURLMaxQueue(t *testing.T) {
	ctx := context.Background()
	a, err := adapters.Open(ctx, "mem://?namespace=TestURLMaxQueue&max_queue=7", adapters.NotExclusive())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	subscribe(t, a, lb("orders", "g"))
	if q, ok := mem.Default().Stats().Queue("TestURLMaxQueue", "orders", "g", ""); !ok || q.MaxReady != 7 {
		t.Fatalf("queue %+v (found %v), want MaxReady 7", q, ok)
	}
	if _, err := adapters.Open(ctx, "mem://?max_queue=-1", adapters.NotExclusive()); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("max_queue=-1: %v, want ErrInvalid", err)
	}
}
