package pulsartest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// Features the broker does not implement must fail fast with a clear error
// instead of leaving the client waiting for its operation timeout.
func TestUnsupportedFeaturesFailFast(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	first := send(t, p, &pulsar.ProducerMessage{Payload: []byte("x")})

	fast := func(name string, fn func() error) {
		t.Helper()
		start := time.Now()
		err := fn()
		if err == nil {
			t.Errorf("%s: succeeded, want an error", name)
			return
		}
		if d := time.Since(start); d > wait/2 {
			t.Errorf("%s: failed only after %v: %v", name, d, err)
		}
	}
	fast("Key_Shared subscription", func() error {
		cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "ks", Type: pulsar.KeyShared})
		if err == nil {
			cons.Close()
		}
		return err
	})
	fast("exclusive producer access mode", func() error {
		prod, err := c.CreateProducer(pulsar.ProducerOptions{
			Topic: topic, ProducerAccessMode: pulsar.ProducerAccessModeExclusive,
		})
		if err == nil {
			prod.Close()
		}
		return err
	})
	fast("seek", func() error {
		cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "seeker"})
		return cons.Seek(first)
	})
	fast("reader at a message id", func() error {
		r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: first})
		if err == nil {
			r.Close()
		}
		return err
	})
}

func TestReaderFromEarliest(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("one")})
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatalf("CreateReader: %v", err)
	}
	defer r.Close()
	ctx := t.Context()
	m, err := r.Next(ctx)
	if err != nil || string(m.Payload()) != "one" {
		t.Fatalf("Next = %v, %v", m, err)
	}
	st, _ := b.Topic(topic)
	if len(st.Subscriptions) != 1 || !strings.HasPrefix(st.Subscriptions[0], "reader-") {
		t.Fatalf("subscriptions %v, want one reader subscription", st.Subscriptions)
	}
	r.Close()
	eventually(t, "the reader's non-durable subscription to go away", func() bool {
		st, _ := b.Topic(topic)
		return len(st.Subscriptions) == 0
	})
}
