package activemq_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
)

// TestWatermillUniversalSuite runs Watermill's own pub/sub suite against
// the shared Watermill bridge (adapters/watermill) over the adapter on the
// package's broker.
//
// Features, honestly: consumer groups yes (a virtual-topic queue per
// group); exactly-once no (at least once); guaranteed order no (a nack
// requeues a copy at the tail of the queue); persistent yes (persistent
// messages in KahaDB); new subscribers receive old messages no (a group
// receives what is published after its queue exists); context preserved
// no (only the envelope travels). The reconnect case is not run: the
// broker is a child of this test process, and Watermill restarts a
// service with a command of another process (the fault kit's
// broker-restart scenario covers a restart, TestReliability).
func TestWatermillUniversalSuite(t *testing.T) {
	b := activemqtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := activemq.New(ctx, activemq.Options{Addr: b.StompAddr, Namespace: namespace("wm")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	wmtest.Run(t, wmtest.Features, wmbridge.SubscriberConfig{}, wmtest.Same(a))
}
