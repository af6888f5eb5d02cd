package kafka_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/sluicemq/sluice/adapters/kafka"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
)

// TestWatermillUniversal runs Watermill's universal Pub/Sub suite through
// the one Watermill bridge (adapters/watermill) over the adapter, on
// kfake (a Kafka wire-protocol peer, not Apache Kafka) or KAFKA_BROKERS.
//
// Features, honestly: consumer groups yes; exactly-once no (at least
// once); guaranteed order no (many in flight per partition, Nack
// republishes to the tail); persistent yes. A new subscriber of the same
// consumer group shares the group's position, so
// NewSubscriberReceivesOldMessages is false.
func TestWatermillUniversal(t *testing.T) {
	if testing.Short() {
		t.Skip("the universal suite publishes tens of thousands of messages")
	}
	b := newBroker(t)
	make := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		cfg := b.config("wm", 8)
		cfg.StartFrom = kafka.StartOldest
		a := b.adapter(t, cfg)
		return wmbridge.NewPublisher(a), wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: group, InFlight: 256})
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
