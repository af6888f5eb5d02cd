package wmbridge_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
)

// TestUniversalSuiteOnMem runs Watermill's own pub/sub suite through the
// bridge over the in-process adapter; each broker adapter's package runs
// it over its own broker.
//
// Features: consumer groups yes; exactly-once no (at least once); order
// no (a nack requeues behind later messages); persistent yes (a group's
// queue outlives its subscribers for the broker's life, which spans the
// suite); a new subscriber receives old messages no (a group receives
// what is published after it exists); context preserved
// no (only the envelope travels). The reconnect case needs a broker
// restarted by another process and is not run.
func TestUniversalSuiteOnMem(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: Watermill's suite takes a while")
	}
	a := newMem(t)
	features := tests.Features{
		ConsumerGroups:                   true,
		ExactlyOnceDelivery:              false,
		GuaranteedOrder:                  false,
		Persistent:                       true,
		NewSubscriberReceivesOldMessages: false,
		ContextPreserved:                 false,
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return wmbridge.NewPublisher(a), wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{})
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return wmbridge.NewPublisher(a), wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: group})
		})
}
