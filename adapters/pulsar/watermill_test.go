package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
)

// TestWatermillUniversalSuite runs Watermill's own pub/sub suite through
// adapters/watermill over the adapter, with the real client against
// pulsartest (NOT Apache Pulsar).
//
// Features, honestly: consumer groups yes (a Shared subscription per
// group); exactly-once no (at least once); guaranteed order no (a nack
// redelivers later, competing consumers); persistent yes (a durable
// subscription keeps what it did not ack); new subscribers receive old
// messages no (a group starts at the topic's end); context preserved no
// (only the envelope travels). No RestartServiceCommand: the fault kit's
// broker-restart scenario (reliability_test.go) covers a restart.
func TestWatermillUniversalSuite(t *testing.T) {
	b, err := pulsartest.Start()
	if err != nil {
		t.Fatalf("starting pulsartest: %v", err)
	}
	t.Cleanup(b.Close)
	a, err := pulsar.New(context.Background(), pulsar.Options{URL: b.URL(), RequeueTick: 9 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	wmtest.Run(t, wmtest.Features, wmbridge.SubscriberConfig{}, wmtest.Same(a))
}
