package kafkaqueue_test

import (
	"testing"

	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
	"github.com/sluicemq/sluice/ports"
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
	wmtest.Run(t, wmtest.Features, wmbridge.SubscriberConfig{Group: "test", InFlight: 256}, func(t *testing.T) ports.Adapter {
		o := b.options("wm", 4)
		o.StartOldest = true // the suite publishes before it subscribes a new group
		return b.adapter(t, o)
	})
}
