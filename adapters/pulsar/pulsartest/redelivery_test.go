package pulsartest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

func TestSharedSubscriptionSplitsMessages(t *testing.T) {
	b := startBroker(t)
	c1, c2 := newClient(t, b), newClient(t, b)
	topic := topicName(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared}
	a, z := subscribe(t, c1, opts), subscribe(t, c2, opts)
	eventually(t, "both consumers to grant permits", func() bool {
		st, _ := b.Subscription(topic, "sub")
		return len(st.Consumers) == 2 && st.Consumers[0].Permits > 0 && st.Consumers[1].Permits > 0
	})
	p := newProducer(t, c1, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	const n = 20
	for i := range n {
		send(t, p, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%d", i)})
	}

	seen := map[string]string{}
	counts := map[string]int{}
	for _, cons := range []pulsar.Consumer{a, z} {
		// Round robin over two consumers with permits gives each half.
		for range n / 2 {
			m := receive(t, cons)
			if prev, dup := seen[string(m.Payload())]; dup {
				t.Fatalf("message %s delivered to %s and %s", m.Payload(), prev, cons.Name())
			}
			seen[string(m.Payload())] = cons.Name()
			counts[cons.Name()]++
			ack(t, cons, m)
		}
	}
	if len(seen) != n || counts[a.Name()] != n/2 || counts[z.Name()] != n/2 {
		t.Fatalf("split %v over %d distinct messages, want %d spread evenly", counts, len(seen), n)
	}
	receiveNone(t, a, 100*msTick)
	receiveNone(t, z, 100*msTick)
}

func TestNackRedeliversWithCountPlusOne(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
		NackRedeliveryDelay: 20 * time.Millisecond, AckWithResponse: true,
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("retry-me")})

	for want := uint32(0); want <= 3; want++ {
		m := receive(t, cons)
		if string(m.Payload()) != "retry-me" || m.RedeliveryCount() != want {
			t.Fatalf("delivery %d: got %q with RedeliveryCount %d, want %d", want, m.Payload(), m.RedeliveryCount(), want)
		}
		if want < 3 {
			cons.Nack(m)
			continue
		}
		ack(t, cons, m)
	}
	receiveNone(t, cons, 100*msTick)
	if n := backlog(t, b, topic, "sub"); n != 0 {
		t.Fatalf("backlog = %d, want 0", n)
	}
}

func TestDeliverAfterIsNotDeliveredEarly(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic})

	const delay = 400 * time.Millisecond
	before := time.Now()
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("later"), DeliverAfter: delay})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("now")})
	nowStored := time.Now().UnixMilli()
	// The client stamps deliver_at_time = its clock + delay in whole
	// milliseconds, so the earliest legal delivery is this instant.
	earliest := before.Add(delay).UnixMilli()
	if nowStored < earliest {
		if st, _ := b.Subscription(topic, "sub"); st.Delayed != 1 && time.Now().UnixMilli() < earliest {
			t.Fatalf("delayed count %d while the delay runs, want 1", st.Delayed)
		}
	}

	got := map[string]int64{}
	var order []string
	for range 2 {
		m := receive(t, cons)
		got[string(m.Payload())] = time.Now().UnixMilli()
		order = append(order, string(m.Payload()))
		ack(t, cons, m)
	}
	at, ok := got["later"]
	if !ok || len(got) != 2 {
		t.Fatalf("received %v, want later and now", order)
	}
	if at < earliest {
		t.Fatalf("delayed message arrived %d ms before its deliver-at time", earliest-at)
	}
	// When the broker stored "now" before the delay ran out (its receipt
	// came back in time), "now" must have been delivered first.
	if nowStored < earliest && order[0] != "now" {
		t.Fatalf("order %v: the delayed message overtook one stored during its delay", order)
	}
}

func TestDeliverAfterIgnoredOnExclusive(t *testing.T) {
	// Pulsar applies deliver-at time only on Shared subscriptions.
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("later"), DeliverAfter: time.Hour})
	if m := receive(t, cons); string(m.Payload()) != "later" {
		t.Fatalf("got %q", m.Payload())
	}
}

func TestClosedConsumerHandsUnackedToNext(t *testing.T) {
	for _, typ := range []pulsar.SubscriptionType{pulsar.Shared, pulsar.Exclusive, pulsar.Failover} {
		t.Run(subTypeName(typ), func(t *testing.T) {
			b := startBroker(t)
			c := newClient(t, b)
			topic := topicName(t)
			opts := pulsar.ConsumerOptions{
				Topic: topic, SubscriptionName: "sub", Type: typ, AckWithResponse: true,
			}
			first := subscribe(t, c, opts)
			p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
			for i := range 3 {
				send(t, p, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)})
			}
			ack(t, first, receive(t, first)) // m0
			receive(t, first)                // m1, left unacknowledged
			first.Close()                    // m2 was prefetched: also unacknowledged

			next := subscribe(t, c, opts)
			for _, want := range []string{"m1", "m2"} {
				m := receive(t, next)
				if string(m.Payload()) != want {
					t.Fatalf("next consumer got %q, want %q", m.Payload(), want)
				}
				// Pulsar does not count a hand-over as a redelivery.
				if m.RedeliveryCount() != 0 {
					t.Fatalf("%s RedeliveryCount = %d after a consumer close, want 0", want, m.RedeliveryCount())
				}
				ack(t, next, m)
			}
			receiveNone(t, next, 100*msTick)
		})
	}
}

func TestDurableSubscriptionKeepsMessagesWhileDisconnected(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "durable", Type: pulsar.Shared}
	subscribe(t, c, opts).Close() // creates the subscription, then leaves

	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 5 {
		send(t, p, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%d", i)})
	}
	st, ok := b.Subscription(topic, "durable")
	if !ok || len(st.Consumers) != 0 || st.Backlog != 5 || !st.Durable {
		t.Fatalf("subscription while disconnected = %+v (exists %v), want durable, 0 consumers, backlog 5", st, ok)
	}
	back := subscribe(t, c, opts)
	for i := range 5 {
		if m := receive(t, back); string(m.Payload()) != fmt.Sprint(i) {
			t.Fatalf("got %q, want %d", m.Payload(), i)
		}
	}
}

func TestFailoverActiveConsumerAndTakeover(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Failover}
	active := subscribe(t, c, opts)
	standby := subscribe(t, c, opts)
	eventually(t, "two consumers on the subscription", func() bool {
		st, _ := b.Subscription(topic, "sub")
		return len(st.Consumers) == 2
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("a")})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("b")})
	if m := receive(t, active); string(m.Payload()) != "a" {
		t.Fatalf("active got %q, want a", m.Payload())
	}
	receiveNone(t, standby, 100*msTick)
	active.Close()
	for _, want := range []string{"a", "b"} {
		if m := receive(t, standby); string(m.Payload()) != want {
			t.Fatalf("standby got %q, want %q", m.Payload(), want)
		}
	}
}

func subTypeName(t pulsar.SubscriptionType) string {
	switch t {
	case pulsar.Shared:
		return "Shared"
	case pulsar.Exclusive:
		return "Exclusive"
	case pulsar.Failover:
		return "Failover"
	}
	return fmt.Sprint(int(t))
}

func TestClientDeadLetterPolicyUsesRedeliveryCount(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	dlq := topic + "-DLQ"
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
		NackRedeliveryDelay: 20 * time.Millisecond,
		DLQ:                 &pulsar.DLQPolicy{MaxDeliveries: 2, DeadLetterTopic: dlq, InitialSubscriptionName: "dead"},
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("poison"), Properties: map[string]string{"k": "v"}})
	for want := uint32(0); want < 2; want++ {
		m := receive(t, cons)
		if m.RedeliveryCount() != want {
			t.Fatalf("delivery with RedeliveryCount %d, want %d", m.RedeliveryCount(), want)
		}
		cons.Nack(m)
	}
	// The client moves the message to the dead-letter topic once the
	// broker's redelivery count reaches MaxDeliveries, then acknowledges it.
	eventually(t, "the original to be acknowledged", func() bool {
		st, ok := b.Subscription(topic, "sub")
		return ok && st.Backlog == 0
	})
	dead := subscribe(t, c, pulsar.ConsumerOptions{Topic: dlq, SubscriptionName: "dead", Type: pulsar.Shared})
	m := receive(t, dead)
	if string(m.Payload()) != "poison" || m.Properties()["k"] != "v" {
		t.Fatalf("dead letter %q %v", m.Payload(), m.Properties())
	}
}

func TestNackOnExclusiveRewindsWithoutCounting(t *testing.T) {
	// Pulsar keeps no redelivery count on Exclusive and Failover
	// subscriptions: a redelivery request rewinds the cursor instead.
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive,
		NackRedeliveryDelay: 20 * time.Millisecond, AckWithResponse: true,
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 3 {
		send(t, p, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m%d", i)})
	}
	var ms []pulsar.Message
	for range 3 {
		ms = append(ms, receive(t, cons))
	}
	ack(t, cons, ms[0])
	ack(t, cons, ms[2])
	cons.Nack(ms[1])
	m := receive(t, cons)
	if string(m.Payload()) != "m1" || m.RedeliveryCount() != 0 {
		t.Fatalf("after nack got %q with RedeliveryCount %d, want m1 with 0", m.Payload(), m.RedeliveryCount())
	}
	ack(t, cons, m)
	receiveNone(t, cons, 100*msTick)
	if n := backlog(t, b, topic, "sub"); n != 0 {
		t.Fatalf("backlog = %d, want 0", n)
	}
}

func TestClientReconsumeLaterThroughRetryTopic(t *testing.T) {
	// ReconsumeLater is client-side: it republishes to a retry topic with
	// DeliverAfter and acknowledges the original, so it exercises the
	// broker's multi-topic subscribe and deliver-at-time paths.
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, RetryEnable: true,
		DLQ: &pulsar.DLQPolicy{MaxDeliveries: 5, RetryLetterTopic: topic + "-RETRY", DeadLetterTopic: topic + "-DLQ"},
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("again")})
	m := receive(t, cons)
	const delay = 200 * time.Millisecond
	earliest := time.Now().Add(delay).UnixMilli()
	cons.ReconsumeLater(m, delay)
	back := receive(t, cons)
	if got := time.Now().UnixMilli(); got < earliest {
		t.Fatalf("retried message back %d ms early", earliest-got)
	}
	if string(back.Payload()) != "again" || back.Properties()[pulsar.SysPropertyReconsumeTimes] != "1" {
		t.Fatalf("retried message %q with properties %v", back.Payload(), back.Properties())
	}
	ack(t, cons, back)
}
