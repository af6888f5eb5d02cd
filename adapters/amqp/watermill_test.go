package amqp_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
)

// TestWatermillUniversalSuite runs Watermill's own pub/sub suite against
// the adapter's Watermill publisher and subscriber, on a node of its own
// (the reconnect case restarts it with rabbitmqctl stop_app/start_app).
//
// Features, honestly: consumer groups yes (a durable queue per group);
// exactly-once no (at least once); guaranteed order no (competing
// consumers, and a nack requeues at the tail); persistent yes (durable
// quorum queues, persistent messages); new subscribers receive old
// messages no (a group receives what is published after its queue
// exists); context preserved no (only the envelope travels).
func TestWatermillUniversalSuite(t *testing.T) {
	node := rabbittest.Own(t, rabbittest.Options{})
	a := newAdapter(t, amqp.Options{URL: node.URL, ReconnectBackoff: 50 * time.Millisecond, ReconnectMaxBackoff: time.Second})
	features := tests.Features{
		ConsumerGroups:                   true,
		ExactlyOnceDelivery:              false,
		GuaranteedOrder:                  false,
		Persistent:                       true,
		NewSubscriberReceivesOldMessages: false,
		ContextPreserved:                 false,
		RestartServiceCommand:            node.RestartCommand(),
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return amqp.NewWatermillPublisher(a), amqp.NewWatermillSubscriber(a, amqp.WatermillSubscriberConfig{})
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return amqp.NewWatermillPublisher(a), amqp.NewWatermillSubscriber(a, amqp.WatermillSubscriberConfig{Group: group})
		})
}
