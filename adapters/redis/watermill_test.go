package redis_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
)

// TestWatermillUniversalSuite runs Watermill's own pub/sub suite against
// the shared Watermill bridge (adapters/watermill) over the adapter, on a
// durable server of its own.
//
// Features, honestly: consumer groups yes; exactly-once no (at least
// once); guaranteed order no (competing consumers, claims and requeues);
// persistent yes (appendfsync always); new subscribers receive old
// messages no (a group starts at the stream's end); context preserved no.
// TestReconnect does not run (no RestartServiceCommand): the fault kit's
// broker-restart scenario (reliability_test.go) covers a restart.
func TestWatermillUniversalSuite(t *testing.T) {
	srv := redistest.Own(t, redistest.Options{Durable: true})
	a := newAdapter(t, redis.Options{Addr: srv.Addr, ClaimMinIdle: 2 * time.Second})
	features := tests.Features{
		ConsumerGroups:                   true,
		ExactlyOnceDelivery:              false,
		GuaranteedOrder:                  false,
		Persistent:                       true,
		NewSubscriberReceivesOldMessages: false,
		ContextPreserved:                 false,
		// No RestartServiceCommand: the server is this test process's
		// child; restarts are the fault kit's broker-restart scenario.
	}
	tests.TestPubSub(t, features,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return wmbridge.NewPublisher(a), wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{})
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return wmbridge.NewPublisher(a), wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: group})
		})
}
