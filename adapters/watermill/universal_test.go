package wmbridge_test

import (
	"testing"

	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/adapters/watermill/wmtest"
)

// TestUniversalSuiteOnMem runs Watermill's own pub/sub suite through the
// bridge over the in-process adapter; each broker adapter's package runs
// it over its own broker.
func TestUniversalSuiteOnMem(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: Watermill's suite takes a while")
	}
	wmtest.Run(t, wmtest.Features, wmbridge.SubscriberConfig{}, wmtest.Same(newMem(t)))
}
