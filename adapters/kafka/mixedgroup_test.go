package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
)

// saramaMember is a plain sarama consumer-group handler: it reports each
// session's claims and every record's payload, and marks it.
type saramaMember struct {
	claims chan []int32
	got    chan string
}

func (m *saramaMember) Setup(s sarama.ConsumerGroupSession) error {
	for _, ps := range s.Claims() {
		m.claims <- ps
	}
	return nil
}

func (m *saramaMember) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (m *saramaMember) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for r := range c.Messages() {
		m.got <- string(r.Value)
		s.MarkMessage(r, "")
	}
	return nil
}

// TestGroupSharedWithASaramaMember: a subscription and a sarama consumer
// (its default range strategy) in one consumer group split the partitions
// between them, and each message sent afterwards is handled once, by one
// of them: a group can move from sarama consumers to sluice one member at
// a time.
func TestGroupSharedWithASaramaMember(t *testing.T) {
	b := newBroker(t)
	const ns = "mixed"
	spec := ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 64}
	a := b.adapter(t, b.config(ns, 4))
	s := subscribe(t, a, spec)

	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	conf.Consumer.Group.Heartbeat.Interval, conf.Consumer.Group.Session.Timeout = testHeartbeat, testSession
	conf.Consumer.Group.Rebalance.Timeout = testRebalance
	cg, err := sarama.NewConsumerGroup(b.addrs, ns+".g", conf)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := &saramaMember{claims: make(chan []int32, 16), got: make(chan string, 64)}
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for ctx.Err() == nil && cg.Consume(ctx, []string{kafka.PhysicalTopic(ns, "t")}, m) == nil {
		}
	}()
	defer func() { cancel(); _ = cg.Close(); <-consumed }()
	select {
	case ps := <-m.claims:
		if len(ps) != 2 {
			t.Fatalf("the sarama member claimed partitions %v, want 2 of the 4 (range over two members)", ps)
		}
	case <-ctx.Done():
		t.Fatal("the sarama member never joined the subscription's group")
	}

	const n = 40
	keys, payloads := make([]string, n), make([]string, n)
	for i := range n {
		keys[i], payloads[i] = fmt.Sprintf("k%02d", i), fmt.Sprintf("m%02d", i)
	}
	send(t, a, "t", keys, payloads...)
	seen := map[string]string{}
	handled := func(msg, by string) {
		if prev, ok := seen[msg]; ok {
			t.Fatalf("%s handled twice: by %s and by %s", msg, prev, by)
		}
		seen[msg] = by
	}
	for len(seen) < n {
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Millisecond)
		ds, _ := s.Receive(rctx, n)
		rcancel()
		for _, d := range ds {
			handled(string(d.Payload), "sluice")
		}
		if len(ds) > 0 {
			if err := s.Settle(ctx, ds, ack); err != nil {
				t.Fatalf("settle: %v", err)
			}
		}
	drain:
		for {
			select {
			case msg := <-m.got:
				handled(msg, "sarama")
			default:
				break drain
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("handled %d of %d messages: %v", len(seen), n, seen)
		}
	}
	by := map[string]int{}
	for _, who := range seen {
		by[who]++
	}
	if by["sluice"] == 0 || by["sarama"] == 0 {
		t.Fatalf("one member handled every message: %v (each holds two partitions)", by)
	}
	t.Logf("handled once each: %v", by)
}
