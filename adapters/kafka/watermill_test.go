package kafka_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/sluicemq/sluice/adapters/kafka"
)

// TestWatermillUniversal runs Watermill's universal Pub/Sub suite against
// the adapter's Watermill publisher and subscriber, on kfake (a Kafka
// wire-protocol peer, not Apache Kafka) or KAFKA_BROKERS.
//
// Features, honestly: consumer groups yes; exactly-once no (at least
// once); guaranteed order no (many in flight per partition, Nack
// republishes to the tail); persistent yes. A new subscriber of the same
// consumer group shares the group's position, so
// NewSubscriberReceivesOldMessages is false for the grouped constructor;
// it is checked separately for group-less (per-instance group)
// subscribers, which start at the oldest message with StartOldest.
func TestWatermillUniversal(t *testing.T) {
	if testing.Short() {
		t.Skip("the universal suite publishes tens of thousands of messages")
	}
	b := newBroker(t)
	make := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		cfg := b.config("wm", 8)
		cfg.StartFrom = kafka.StartOldest
		a := b.adapter(t, cfg)
		return a.WatermillPublisher(), a.WatermillSubscriber(kafka.WatermillConfig{Group: group, InFlight: 256, NackDelay: 10 * time.Millisecond})
	}
	tests.TestPubSub(t, tests.Features{
		ConsumerGroups:                   true,
		ExactlyOnceDelivery:              false,
		GuaranteedOrder:                  false,
		Persistent:                       true,
		NewSubscriberReceivesOldMessages: false,
	},
		func(t *testing.T) (message.Publisher, message.Subscriber) { return make(t, "test") },
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) { return make(t, group) },
	)
}

// TestWatermillNewSubscriberReceivesOldMessages: group-less Watermill
// subscribers get a per-instance group, which (with StartOldest) starts at
// the oldest retained message.
func TestWatermillNewSubscriberReceivesOldMessages(t *testing.T) {
	b := newBroker(t)
	tests.TestNewSubscriberReceivesOldMessages(t, tests.TestContext{
		TestID:   tests.NewTestID(),
		Features: tests.Features{Persistent: true, NewSubscriberReceivesOldMessages: true},
	}, func(t *testing.T) (message.Publisher, message.Subscriber) {
		cfg := b.config("wmold", 4)
		cfg.StartFrom = kafka.StartOldest
		a := b.adapter(t, cfg)
		return a.WatermillPublisher(), a.WatermillSubscriber(kafka.WatermillConfig{})
	})
}
