package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// TestOneMebibytePayloadIsASizeErrorNotUnconfirmed: the 1 MiB payload that
// sarama used to refuse as "Producer.MaxMessageBytes" (wrapped as
// ErrUnconfirmed, so retried forever) is refused as a *ports.SizeError
// counting the envelope, before any topic is created; nothing reaches the
// cluster.
func TestOneMebibytePayloadIsASizeErrorNotUnconfirmed(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("size", 1))
	err := a.Send(context.Background(), ports.Message{Topic: "big", Payload: make([]byte, 1<<20)})
	var se *ports.SizeError
	if !errors.As(err, &se) || !errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Send of 1 MiB returned %v, want a *ports.SizeError and not ErrUnconfirmed", err)
	}
	if se.Limit != 1_000_000 || se.Size < 1<<20 {
		t.Fatalf("SizeError %+v: want 1 MiB refused against 1,000,000", se)
	}
	// A payload under the limit whose record (key, headers, overhead) is
	// over it is refused too, the envelope counted.
	err = a.Send(context.Background(), ports.Message{Topic: "big", Key: "k", Payload: make([]byte, 1_000_000-8)})
	if !errors.As(err, &se) || !se.Envelope || se.Size <= 1_000_000 || errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Send of a payload just under the limit returned %v, want a *ports.SizeError counting the envelope", err)
	}
	admin, aerr := sarama.NewClusterAdmin(b.addrs, sarama.NewConfig())
	if aerr != nil {
		t.Fatal(aerr)
	}
	defer admin.Close()
	topics, aerr := admin.ListTopics()
	if aerr != nil {
		t.Fatal(aerr)
	}
	for name := range topics {
		if strings.HasPrefix(name, "size.") {
			t.Fatalf("topic %s was created for a refused message", name)
		}
	}
}

// TestDeclareTopicSetsRetentionAndRefusesAnother: DeclareTopic creates the
// topic with retention.ms; another adapter declaring it with another
// retention gets a RedeclareError naming retention.ms and the topic keeps
// its config. MaxLength is refused.
func TestDeclareTopicSetsRetentionAndRefusesAnother(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("ret", 1))
	ctx := context.Background()
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "state", Retention: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	other := b.adapter(t, b.config("ret", 1))
	err := ports.DeclareTopic(ctx, other, ports.TopicSpec{Topic: "state", Retention: time.Minute})
	var re *ports.RedeclareError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "retention.ms: existing 30000, declared 60000") {
		t.Fatalf("redeclare with another retention: %v", err)
	}
	if err := ports.DeclareTopic(ctx, other, ports.TopicSpec{Topic: "state", Retention: 30 * time.Second}); err != nil {
		t.Fatalf("declaring it as it exists: %v", err)
	}
	if err := ports.DeclareTopic(ctx, a, ports.TopicSpec{Topic: "capped", MaxLength: 10}); !errors.Is(err, ports.ErrUnsupported) {
		t.Fatalf("MaxLength: %v, want ErrUnsupported", err)
	}
}

// TestSingleActiveStaysWithItsHolderWhenAMemberJoins: a member joining a
// single-active group causes a rebalance, but the assignment stays with
// the member that holds it; the newcomer stands by.
func TestSingleActiveStaysWithItsHolderWhenAMemberJoins(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("sa", 3))
	spec := ports.SubscriptionSpec{Topic: "sa", Group: "g", SingleActive: true}
	first := subscribe(t, a, spec)
	send(t, a, "sa", nil, "one")
	receiveAck(t, first, 1)
	second := subscribe(t, a, spec)
	send(t, a, "sa", nil, "two", "three")
	receiveAck(t, first, 2)
	receiveNone(t, second, 500*time.Millisecond)
}

func receiveAck(t *testing.T, s ports.Subscription, n int) {
	t.Helper()
	ds := receiveN(t, s, n, 15*time.Second)
	if err := s.Settle(context.Background(), ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}
