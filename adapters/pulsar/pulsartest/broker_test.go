package pulsartest_test

import (
	"fmt"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
)

func TestRoundTripWithPropertiesAndKey(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, AckWithResponse: true,
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, Name: "round-trip"})

	sent := send(t, p, &pulsar.ProducerMessage{
		Payload:    []byte("hello"),
		Key:        "k1",
		Properties: map[string]string{"ce-type": "demo", "empty": ""},
	})
	m := receive(t, cons)
	if string(m.Payload()) != "hello" || m.Key() != "k1" {
		t.Fatalf("got payload %q key %q, want hello k1", m.Payload(), m.Key())
	}
	if got := m.Properties(); len(got) != 2 || got["ce-type"] != "demo" || got["empty"] != "" {
		t.Fatalf("properties = %v", got)
	}
	if m.RedeliveryCount() != 0 || m.ProducerName() != "round-trip" || m.Topic() != topic {
		t.Fatalf("redelivery %d producer %q topic %q", m.RedeliveryCount(), m.ProducerName(), m.Topic())
	}
	if m.ID().LedgerID() != sent.LedgerID() || m.ID().EntryID() != sent.EntryID() {
		t.Fatalf("received id %v, send receipt id %v", m.ID(), sent)
	}
	if n := backlog(t, b, topic, "sub"); n != 1 {
		t.Fatalf("backlog before ack = %d, want 1", n)
	}
	ack(t, cons, m)
	if n := backlog(t, b, topic, "sub"); n != 0 {
		t.Fatalf("backlog after ack = %d, want 0", n)
	}
}

func TestBatchEntryKeptWholeAndAckedWhole(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive, AckWithResponse: true,
	})
	p := newProducer(t, c, pulsar.ProducerOptions{
		Topic: topic, BatchingMaxMessages: 4, BatchingMaxPublishDelay: wait,
	})
	sendBatch(t, p, "b", 4)

	st, _ := b.Topic(topic)
	if st.Entries != 1 || st.Messages != 4 {
		t.Fatalf("topic holds %d entries / %d messages, want one batch entry of 4", st.Entries, st.Messages)
	}
	var first pulsar.MessageID
	for i := range 4 {
		m := receive(t, cons)
		if want := fmt.Sprintf("b%d", i); string(m.Payload()) != want {
			t.Fatalf("message %d = %q, want %q", i, m.Payload(), want)
		}
		if i == 0 {
			first = m.ID()
		}
		if m.ID().EntryID() != first.EntryID() || m.ID().BatchIdx() != int32(i) || m.ID().BatchSize() != 4 {
			t.Fatalf("message %d id %v: want entry %d batch index %d of 4", i, m.ID(), first.EntryID(), i)
		}
		if i < 3 {
			ack(t, cons, m)
			if n := backlog(t, b, topic, "sub"); n != 4 {
				t.Fatalf("backlog after acking %d of 4 without batch-index acks = %d, want 4", i+1, n)
			}
			continue
		}
		ack(t, cons, m)
	}
	if n := backlog(t, b, topic, "sub"); n != 0 {
		t.Fatalf("backlog after acking the whole batch = %d, want 0", n)
	}
}

func TestBatchIndexAckRedeliversOnlyUnacked(t *testing.T) {
	for _, tc := range []struct {
		enabled     bool
		wantBacklog int
		wantBack    []string
	}{
		{true, 3, []string{"m0", "m2", "m4"}},
		{false, 5, []string{"m0", "m1", "m2", "m3", "m4"}},
	} {
		t.Run(fmt.Sprintf("broker-batch-index-ack=%v", tc.enabled), func(t *testing.T) {
			b := startBroker(t, pulsartest.WithBatchIndexAck(tc.enabled))
			c := newClient(t, b)
			topic := topicName(t)
			opts := pulsar.ConsumerOptions{
				Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
				AckWithResponse: true, EnableBatchIndexAcknowledgment: true,
			}
			cons := subscribe(t, c, opts)
			p := newProducer(t, c, pulsar.ProducerOptions{
				Topic: topic, BatchingMaxMessages: 5, BatchingMaxPublishDelay: wait,
			})
			sendBatch(t, p, "m", 5)
			for i := range 5 {
				m := receive(t, cons)
				if i == 1 || i == 3 {
					ack(t, cons, m)
				}
			}
			if n := backlog(t, b, topic, "sub"); n != tc.wantBacklog {
				t.Fatalf("backlog after batch-index acks of 2 of 5 = %d, want %d", n, tc.wantBacklog)
			}
			cons.Close()

			next := subscribe(t, c, opts)
			var got []string
			for range tc.wantBack {
				m := receive(t, next)
				got = append(got, string(m.Payload()))
				ack(t, next, m)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantBack) {
				t.Fatalf("redelivered %v, want %v", got, tc.wantBack)
			}
			receiveNone(t, next, 200*msTick)
			if n := backlog(t, b, topic, "sub"); n != 0 {
				t.Fatalf("backlog = %d, want 0", n)
			}
		})
	}
}

func TestInitialPosition(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("old")})

	earliest := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "earliest", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
	})
	latest := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "latest", SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest,
	})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("new")})

	for _, want := range []string{"old", "new"} {
		if m := receive(t, earliest); string(m.Payload()) != want {
			t.Fatalf("earliest got %q, want %q", m.Payload(), want)
		}
	}
	if m := receive(t, latest); string(m.Payload()) != "new" {
		t.Fatalf("latest got %q, want new", m.Payload())
	}
}

func TestCumulativeAck(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Failover, AckWithResponse: true,
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	for i := range 5 {
		send(t, p, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%d", i)})
	}
	var third pulsar.Message
	for i := range 5 {
		m := receive(t, cons)
		if i == 2 {
			third = m
		}
	}
	if err := cons.AckCumulative(third); err != nil {
		t.Fatalf("AckCumulative: %v", err)
	}
	if n := backlog(t, b, topic, "sub"); n != 2 {
		t.Fatalf("backlog after cumulative ack of the third of 5 = %d, want 2", n)
	}
}

func TestExclusiveRefusesSecondConsumer(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive})
	second, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Exclusive})
	if err == nil {
		second.Close()
		t.Fatal("second Exclusive consumer was accepted")
	}
	_, err = c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared})
	if err == nil {
		t.Fatal("Shared consumer on a connected Exclusive subscription was accepted")
	}
}

// sendBatch sends n messages "<prefix><i>" asynchronously and flushes them
// as one batch.
func sendBatch(t *testing.T, p pulsar.Producer, prefix string, n int) {
	t.Helper()
	errs := make(chan error, n)
	for i := range n {
		p.SendAsync(t.Context(), &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "%s%d", prefix, i)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
	}
	if err := p.FlushWithCtx(t.Context()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("SendAsync: %v", err)
		}
	}
}
