package kafka_test

import (
	"testing"

	"github.com/sluicemq/sluice/adapters/kafka"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
	"github.com/sluicemq/sluice/ports"
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
	wmtest.Run(t, wmtest.Features, wmbridge.SubscriberConfig{Group: "test", InFlight: 256}, func(t *testing.T) ports.Adapter {
		cfg := b.config("wm", 8)
		cfg.StartFrom = kafka.StartOldest
		return b.adapter(t, cfg)
	})
}
