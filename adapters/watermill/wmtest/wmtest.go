// Package wmtest runs Watermill's universal pub/sub suite
// (github.com/ThreeDotsLabs/watermill/pubsub/tests) through the Watermill
// bridge over a sluice adapter: every adapter's tests call [Run], so the
// bridge is proven the same way on every broker.
package wmtest

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

// Features is what the bridge gives a Watermill subscriber over any
// adapter: consumer groups, and persistence for the broker's life (a
// group's queue outlives its subscribers). Not exactly-once (sluice is
// at least once), not ordered (a nack requeues behind later messages), no
// old messages for a new subscriber (a group receives what is published
// after it exists), no context (only the envelope travels). An adapter
// that differs says so in its own copy.
var Features = tests.Features{ConsumerGroups: true, Persistent: true}

// Run runs tests.TestPubSub with features. Each publisher/subscriber pair
// is made over the adapter open returns (return the same one every time
// to share it, see [Same]); cfg configures every subscriber, its Group
// naming the group of the suite's cases without one. The reconnect case
// needs features.RestartServiceCommand and otherwise does not run.
func Run(t *testing.T, features tests.Features, cfg wmbridge.SubscriberConfig, open func(t *testing.T) ports.Adapter) {
	t.Helper()
	pair := func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		a := open(t)
		c := cfg
		c.Group = group
		return wmbridge.NewPublisher(a), wmbridge.NewSubscriber(a, c)
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return pair(t, cfg.Group) },
		pair)
}

// Same returns an open function for Run that shares a.
func Same(a ports.Adapter) func(*testing.T) ports.Adapter {
	return func(*testing.T) ports.Adapter { return a }
}
