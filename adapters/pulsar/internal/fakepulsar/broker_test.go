package fakepulsar_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/pulsar/internal/fakepulsar"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const topic = "persistent://public/default/t"

func setup(t *testing.T) (*fakepulsar.Broker, pulsar.Client, pulsar.Producer) {
	t.Helper()
	b := fakepulsar.New()
	c := b.NewClient()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); b.Close() })
	return b, c, p
}

func sub(t *testing.T, c pulsar.Client, typ pulsar.SubscriptionType, nackDelay time.Duration) pulsar.Consumer {
	t.Helper()
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: typ, NackRedeliveryDelay: nackDelay})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

func publish(t *testing.T, p pulsar.Producer, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte(id), Properties: map[string]string{"ce-id": id}}); err != nil {
			t.Fatal(err)
		}
	}
}

func recv(t *testing.T, c pulsar.Consumer) pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return m
}

func TestSharedNackCountsAndLastConsumerLeavingClearsCounts(t *testing.T) {
	_, c, p := setup(t)
	cons := sub(t, c, pulsar.Shared, time.Millisecond)
	publish(t, p, "a")
	m := recv(t, cons)
	cons.Nack(m)
	if m = recv(t, cons); m.RedeliveryCount() != 1 {
		t.Fatalf("count after a nack = %d, want 1", m.RedeliveryCount())
	}
	cons.Close()
	// The only consumer left: Pulsar clears the subscription's counts.
	cons = sub(t, c, pulsar.Shared, time.Millisecond)
	if m = recv(t, cons); string(m.Payload()) != "a" || m.RedeliveryCount() != 0 {
		t.Fatalf("after the group restarted: %s count %d, want a count 0", m.Payload(), m.RedeliveryCount())
	}
	if err := cons.Ack(m); err != nil {
		t.Fatal(err)
	}
	cons.Close()
	if err := cons.Ack(m); !errors.Is(err, fakepulsar.ErrConsumerClosed) {
		t.Fatalf("ack on a closed consumer = %v", err)
	}
}

func TestExclusiveNackRewindsWithoutCount(t *testing.T) {
	_, c, p := setup(t)
	cons := sub(t, c, pulsar.Exclusive, time.Millisecond)
	if _, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: pulsar.Exclusive}); err == nil {
		t.Fatal("a second consumer joined an Exclusive subscription")
	}
	publish(t, p, "a", "b")
	recv(t, cons)
	cons.Nack(recv(t, cons)) // nack b only
	// Both unacknowledged messages come back, neither with a count.
	for _, want := range []string{"a", "b"} {
		m := recv(t, cons)
		if string(m.Payload()) != want || m.RedeliveryCount() != 0 {
			t.Fatalf("got %s count %d, want %s count 0", m.Payload(), m.RedeliveryCount(), want)
		}
	}
}

func TestDelayedDeliverySharedOnlyAndEarlyOption(t *testing.T) {
	b, c, p := setup(t)
	cons := sub(t, c, pulsar.Shared, time.Minute)
	sent := time.Now()
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("d"), DeliverAfter: 80 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	recv(t, cons)
	if el := time.Since(sent); el < 80*time.Millisecond {
		t.Fatalf("delayed message delivered after %v", el)
	}
	b.SetEarlyDelivery(time.Hour)
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("e"), DeliverAfter: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// recv waits 5s at most: a minute's delay was dispatched early.
	if m := recv(t, cons); string(m.Payload()) != "e" {
		t.Fatalf("got %s, want e", m.Payload())
	}
}

func TestFaultsAndRecord(t *testing.T) {
	b, c, p := setup(t)
	cons := sub(t, c, pulsar.Shared, time.Minute)
	refused := errors.New("refused")
	b.SetSendFault(func(string, *pulsar.ProducerMessage) error { return refused })
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Properties: map[string]string{"ce-id": "x"}}); !errors.Is(err, refused) {
		t.Fatalf("Send with a fault = %v", err)
	}
	b.SetSendFault(nil)
	publish(t, p, "y")
	m := recv(t, cons)
	b.SetAckFault(func(string, string) error { return refused })
	if err := cons.AckID(m.ID()); !errors.Is(err, refused) {
		t.Fatalf("ack with a fault = %v", err)
	}
	b.SetAckFault(nil)
	if err := cons.AckIDList([]pulsar.MessageID{m.ID()}); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, e := range b.Events() {
		s := string(e.Op) + ":" + e.ID
		if e.Err != nil {
			s += "!"
		}
		ops = append(ops, s)
	}
	want := []string{"send:x!", "send:y", "ack:y!", "ack:y"}
	if len(ops) != len(want) {
		t.Fatalf("events %v, want %v", ops, want)
	}
	for i := range want {
		if ops[i] != want[i] {
			t.Fatalf("events %v, want %v", ops, want)
		}
	}
	if u := b.Unacked(topic, "s"); len(u) != 0 {
		t.Fatalf("unacked %v", u)
	}
}
