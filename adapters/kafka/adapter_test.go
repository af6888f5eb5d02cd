package kafka_test

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// TestRoundTripAckRestart: headers survive the hop, an Ack commits, and a
// new member of the same group does not get acked messages again.
func TestRoundTripAckRestart(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("rt", 2)
	a := b.adapter(t, cfg)
	spec := ports.SubscriptionSpec{Topic: "orders", Group: "g"}
	s := subscribe(t, a, spec)

	msg := ports.Message{Topic: "orders", Key: "k1", Payload: []byte(`{"n":1}`), Headers: ports.NewHeaders(
		ports.HeaderType, "order.v1",
		ports.HeaderRequestID, "req-1",
		"x-user", "u",
	)}
	if err := a.Send(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, s, 1, 10*time.Second)[0]
	for _, hdr := range msg.Headers {
		k, v := hdr.Name, hdr.Value
		if d.Headers.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, d.Headers.Get(k), v)
		}
	}
	if d.Key != "k1" || string(d.Payload) != `{"n":1}` || d.ID == "" || d.RedeliveryCount != 0 {
		t.Fatalf("delivery = key %q payload %q id %q count %d", d.Key, d.Payload, d.ID, d.RedeliveryCount)
	}
	if d.Headers.Get(ports.HeaderPartitionKey) != "k1" {
		t.Errorf("partition key header = %q", d.Headers.Get(ports.HeaderPartitionKey))
	}
	settle(t, s, ack, d)
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}

	a2 := b.adapter(t, cfg)
	s2 := subscribe(t, a2, spec)
	send(t, a2, "orders", nil, "after")
	got := receiveN(t, s2, 1, 10*time.Second)
	if p := payloads(got); !slices.Equal(p, []string{"after"}) {
		t.Fatalf("after restart got %q, want only the new message", p)
	}
}
