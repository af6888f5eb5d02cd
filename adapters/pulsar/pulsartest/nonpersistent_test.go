package pulsartest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// TestNonPersistentTopicPassesMessagesOnly: a message to a non-persistent
// topic without a consumer is dropped (a subscription made later, even at
// the earliest position, never sees it); one sent while a consumer has
// permits is delivered; a negative ack does not bring it back; the
// subscription goes away with its last consumer.
func TestNonPersistentTopicPassesMessagesOnly(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := "non-persistent://public/default/" + strings.TrimPrefix(topicName(t), "persistent://public/default/")
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("nobody listens")})

	cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "live", Type: pulsar.Shared,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest, NackRedeliveryDelay: 10 * time.Millisecond})
	eventually(t, "the consumer's FLOW permits", func() bool {
		st, ok := b.Subscription(topic, "live")
		return ok && len(st.Consumers) == 1 && st.Consumers[0].Permits > 0
	})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("live")})
	m := receive(t, cons)
	if string(m.Payload()) != "live" {
		t.Fatalf("got %q, want only the message sent while the consumer had permits", m.Payload())
	}
	cons.Nack(m)
	receiveNone(t, cons, 300*time.Millisecond)
	if st, ok := b.Subscription(topic, "live"); !ok || st.Backlog != 0 {
		t.Fatalf("subscription stats %+v (ok %v): a non-persistent subscription keeps no backlog", st, ok)
	}
	cons.Close()
	eventually(t, "the subscription's removal with its last consumer", func() bool {
		_, ok := b.Subscription(topic, "live")
		return !ok
	})
}
