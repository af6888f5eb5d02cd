package kafkaqueue_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
)

// TestWatermillUniversal runs Watermill's universal Pub/Sub suite through
// the one Watermill bridge (adapters/watermill) over the adapter, on kfake
// (a Kafka wire-protocol peer with share groups, not Apache Kafka).
//
// Features, honestly: consumer groups yes (share groups); exactly-once no
// (at least once); guaranteed order no (a share group hands a partition's
// records to many members and redelivers out of order); persistent yes. A
// new subscriber of an existing group shares the group's position, so
// NewSubscriberReceivesOldMessages is false.
func TestWatermillUniversal(t *testing.T) {
	if testing.Short() {
		t.Skip("the universal suite publishes tens of thousands of messages")
	}
	b := newBroker(t, 1)
	make := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		o := b.options("wm", 4)
		o.StartOldest = true // the suite publishes before it subscribes a new group
		a := b.adapter(t, o)
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
