package mem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

func TestDeadLetterPublishesThenRemoves(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	dlq := subscribe(t, a, lb(string(ports.DeadLetterTopic("orders")), "ops"))
	if err := a.Send(context.Background(), ports.Message{
		Topic: "orders", Key: "k", Payload: []byte("bad"), Headers: ports.NewHeaders(ports.HeaderType, "order.v1"),
	}); err != nil {
		t.Fatal(err)
	}
	d := receive(t, s, 1)[0]
	settle(t, s, ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poisonf("unknown field"), Attempts: 3}, d)

	got := receive(t, dlq, 1)[0]
	want := map[string]string{
		ports.HeaderDeadLetterReason: "poison: unknown field",
		ports.HeaderDeadLetterTopic:  "orders",
		ports.HeaderAttempts:         "3",
		ports.HeaderType:             "order.v1",
		ports.HeaderID:               d.ID,
	}
	for k, v := range want {
		if got.Headers.Get(k) != v {
			t.Errorf("dead letter header %s = %q, want %q", k, got.Headers.Get(k), v)
		}
	}
	if got.Topic != "orders.dlq" || got.Key != "k" || string(got.Payload) != "bad" || got.ID != d.ID {
		t.Errorf("dead letter = %+v, id %q", got.Message, got.ID)
	}
	if _, ok := d.Headers.Lookup(ports.HeaderDeadLetterReason); ok {
		t.Error("dead-lettering modified the original delivery's headers")
	}
	if q := queueStats(t, b, "orders", "g"); q.Ready != 0 || q.InFlight != 0 {
		t.Fatalf("original not removed: %+v", q)
	}
}

func TestDeadLetterDefaults(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	dlq := subscribe(t, a, lb("orders.dlq", "ops"))
	send(t, a, "orders", "x")
	settle(t, s, requeue, receive(t, s, 1)...)
	settle(t, s, ports.Disposition{Action: ports.DeadLetter}, receive(t, s, 1)...)
	got := receive(t, dlq, 1)[0]
	if got.Headers.Get(ports.HeaderAttempts) != "2" {
		t.Errorf("attempts = %q, want 2 (redelivery count + 1) when Disposition.Attempts is 0", got.Headers.Get(ports.HeaderAttempts))
	}
	if got.Headers.Get(ports.HeaderDeadLetterReason) == "" {
		t.Error("dead letter without a reason header")
	}
}

func TestFailedDeadLetterLeavesOriginalUnsettled(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	dlq := subscribe(t, a, lb("orders.dlq", "ops"))
	send(t, a, "orders", "x", "y")
	ds := receive(t, s, 2)
	poison := ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poisonf("bad")}

	b.FailDeadLetters(true)
	if err := s.Settle(context.Background(), ds, poison); !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("dead letter with a failing publish: %v, want ErrUnconfirmed", err)
	}
	if q := queueStats(t, b, "orders", "g"); q.InFlight != 2 || q.Ready != 0 {
		t.Fatalf("originals %+v, want both still in flight", q)
	}
	if q := queueStats(t, b, "orders.dlq", "ops"); q.Ready != 0 {
		t.Fatalf("dead-letter queue got %d messages from a failed publish", q.Ready)
	}

	b.FailDeadLetters(false)
	settle(t, s, poison, ds...) // the caller may try again
	if got := payloads(receive(t, dlq, 2)); got[0] != "x" || got[1] != "y" {
		t.Fatalf("dead letters %v, want [x y]", got)
	}
	if q := queueStats(t, b, "orders", "g"); q.InFlight != 0 || q.Ready != 0 {
		t.Fatalf("originals %+v, want removed", q)
	}
}

func TestFailedDeadLetterThenStopRedelivers(t *testing.T) {
	b := newBroker(t)
	a := newAdapter(t, b)
	s := subscribe(t, a, lb("orders", "g"))
	send(t, a, "orders", "x")
	d := receive(t, s, 1)[0]
	b.FailDeadLetters(true)
	if err := s.Settle(context.Background(), []*ports.Delivery{d}, ports.Disposition{Action: ports.DeadLetter}); err == nil {
		t.Fatal("dead letter succeeded with a failing publish")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := subscribe(t, newAdapter(t, b), lb("orders", "g"))
	if d := receive(t, s2, 1)[0]; string(d.Payload) != "x" || d.RedeliveryCount != 1 {
		t.Fatalf("redelivered %q count %d, want x with count 1", d.Payload, d.RedeliveryCount)
	}
}
