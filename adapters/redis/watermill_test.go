package redis_test

import (
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
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
	wmtest.Run(t, wmtest.Features, wmbridge.SubscriberConfig{}, wmtest.Same(a))
}
