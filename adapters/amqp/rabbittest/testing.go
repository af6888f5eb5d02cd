package rabbittest

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/adapters/internal/testbroker"
)

var shared = testbroker.Shared[*Node]{Name: "rabbittest", NotInstalled: ErrNotInstalled,
	Start: func() (*Node, error) { return Start(context.Background(), Options{}) }}

// Shared returns the package-wide node, starting it on first use. A test
// binary that calls Shared must call StopShared from TestMain after m.Run.
//
// When RabbitMQ is not installed, Shared skips t with the reason — or fails
// it when the environment variable CI is "true", where a missing broker is
// an error. A node that fails to start always fails t.
func Shared(t testing.TB) *Node {
	t.Helper()
	return shared.Get(t)
}

// StopShared stops the node started by Shared, if any.
func StopShared() error { return shared.Stop() }

// Own starts a node for t alone (for tests that restart or break it) and
// stops it when t ends. Missing RabbitMQ is handled as in Shared.
func Own(t testing.TB, opts Options) *Node {
	t.Helper()
	return testbroker.Own(t, "rabbittest", ErrNotInstalled, func() (*Node, error) { return Start(context.Background(), opts) })
}
