package rocketmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
	"github.com/sluicemq/sluice/ports"
)

// TestWatermillUniversal runs Watermill's universal Pub/Sub suite through
// the Watermill bridge (adapters/watermill) over the adapter on
// rocketmqtest (a RocketMQ 5 protocol peer, NOT Apache RocketMQ).
//
// Features, honestly: consumer groups yes; exactly-once no (at least
// once); guaranteed order no (a nacked message comes back after others);
// persistent yes (SubscribeInitialize makes the group before the test
// publishes). A new group starts at the topic's end, so
// NewSubscriberReceivesOldMessages is false. RocketMQ moves a message to
// the group's %DLQ% topic after its maximum delivery attempts (16 retries
// on a broker's default group config), while the suite nacks some
// messages more often than that (TestContinueAfterErrors: 300 nacks over
// 50 messages, unevenly): the peer runs with 1000 attempts here. Each
// subscription receives up to 16 messages at once (one long poll's batch).
// The suite runs with its short sizes (ForceShort): every case, with
// hundreds of messages instead of thousands. At full size it takes more
// than three minutes under -race here (one RPC per message and per ack,
// and a v5 consumer takes a second or more to start, once per Subscribe),
// which with the TCK and the fault kit exceeds go test's default timeout.
func TestWatermillUniversal(t *testing.T) {
	if testing.Short() {
		t.Skip("the universal suite publishes thousands of messages")
	}
	b, err := rocketmqtest.Start(rocketmqtest.WithMaxDeliveryAttempts(1000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	features := wmtest.Features
	features.ForceShort = true
	cfg := wmbridge.SubscriberConfig{Group: "test", InFlight: 16, NackDelay: 10 * time.Millisecond}
	wmtest.Run(t, features, cfg, func(t *testing.T) ports.Adapter {
		a, err := rocketmq.New(context.Background(), rocketmq.Options{Endpoint: b.Endpoint(), InvisibleDuration: 5 * time.Second, AwaitDuration: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close(context.Background()) })
		return a
	})
}
