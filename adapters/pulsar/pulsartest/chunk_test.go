package pulsartest_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
)

const chunkMax = 16 << 10 // the broker's max_message_size in these tests

func chunkPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*13 + i/241)
	}
	return p
}

// TestChunkedMessageStoredPerChunkAndReassembled: a payload above
// max_message_size from a chunking producer is stored as one entry per
// chunk, each with its own message id, and the consumer hands it out whole;
// acknowledging it acknowledges every chunk.
func TestChunkedMessageStoredPerChunkAndReassembled(t *testing.T) {
	b := startBroker(t, pulsartest.WithMaxMessageSize(chunkMax))
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared, AckWithResponse: true,
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, EnableChunking: true, DisableBatching: true})
	body := chunkPayload(100_000)
	send(t, p, &pulsar.ProducerMessage{Payload: body, Key: "k"})

	st, _ := b.Topic(topic)
	if st.Chunks < 100_000/chunkMax+1 || st.Entries != st.Chunks || st.Messages != st.Chunks || st.ChunkedMessages != 1 {
		t.Fatalf("topic stats %+v: want one chunked message stored as at least %d chunk entries", st, 100_000/chunkMax+1)
	}
	m := receive(t, cons)
	if !bytes.Equal(m.Payload(), body) || m.Key() != "k" {
		t.Fatalf("received %d bytes key %q, want the %d-byte payload whole with key k", len(m.Payload()), m.Key(), len(body))
	}
	if n := backlog(t, b, topic, "sub"); n != st.Chunks {
		t.Fatalf("backlog before the ack = %d, want every chunk (%d)", n, st.Chunks)
	}
	if err := cons.AckIDList([]pulsar.MessageID{m.ID()}); err != nil {
		t.Fatalf("AckIDList: %v", err)
	}
	if n := backlog(t, b, topic, "sub"); n != 0 {
		t.Fatalf("backlog after the ack = %d, want 0 (every chunk acknowledged)", n)
	}
}

// TestChunksSplitAcrossSharedConsumers shows the hazard of chunking on a
// Shared subscription with several consumers, as on Apache Pulsar: the
// chunks of one message are dispatched round robin, each consumer holds
// part of it, and neither can hand it out.
func TestChunksSplitAcrossSharedConsumers(t *testing.T) {
	b := startBroker(t, pulsartest.WithMaxMessageSize(chunkMax))
	c := newClient(t, b)
	topic := topicName(t)
	opts := pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared}
	c1, c2 := subscribe(t, c, opts), subscribe(t, c, opts)
	eventually(t, "both consumers to grant permits", func() bool {
		st, _ := b.Subscription(topic, "sub")
		return len(st.Consumers) == 2 && st.Consumers[0].Permits > 0 && st.Consumers[1].Permits > 0
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, EnableChunking: true, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: chunkPayload(100_000)})

	eventually(t, "the chunks dispatched to both consumers", func() bool {
		st, _ := b.Subscription(topic, "sub")
		return len(st.Consumers) == 2 && st.Consumers[0].Unacked > 0 && st.Consumers[1].Unacked > 0
	})
	receiveNone(t, c1, 200*time.Millisecond)
	receiveNone(t, c2, 200*time.Millisecond)
}
