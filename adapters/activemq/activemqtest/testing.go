package activemqtest

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/adapters/internal/testbroker"
)

var shared = testbroker.Shared[*Broker]{Name: "activemqtest", NotInstalled: ErrNotInstalled,
	Start: func() (*Broker, error) { return Start(context.Background(), Options{}) }}

// Shared returns the test binary's broker, starting it on first use (one
// JVM start per test binary). A test binary that calls Shared must call
// StopShared from TestMain after m.Run.
//
// When ActiveMQ is not installed, Shared skips t with the reason — or fails
// it when the environment variable CI is "true", where a missing broker is
// an error. A broker that fails to start always fails t.
func Shared(t testing.TB) *Broker {
	t.Helper()
	return shared.Get(t)
}

// StopShared stops the broker started by Shared, if any.
func StopShared() error { return shared.Stop() }

// Own starts a broker for t alone (for tests that restart or break it)
// and stops it when t ends. Missing ActiveMQ is handled as in Shared.
func Own(t testing.TB, opts Options) *Broker {
	t.Helper()
	return testbroker.Own(t, "activemqtest", ErrNotInstalled, func() (*Broker, error) { return Start(context.Background(), opts) })
}
