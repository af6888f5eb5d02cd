package rabbittest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
)

var shared struct {
	once sync.Once
	node *Node
	err  error
}

// Shared returns the package-wide node, starting it on first use. A test
// binary that calls Shared must call StopShared from TestMain after m.Run.
//
// When RabbitMQ is not installed, Shared skips t with the reason — or fails
// it when the environment variable CI is "true", where a missing broker is
// an error. A node that fails to start always fails t.
func Shared(t testing.TB) *Node {
	t.Helper()
	shared.once.Do(func() {
		shared.node, shared.err = Start(context.Background(), Options{})
	})
	check(t, shared.err)
	return shared.node
}

// StopShared stops the node started by Shared, if any.
func StopShared() error {
	if shared.node == nil {
		return nil
	}
	return shared.node.Stop()
}

// Own starts a node for t alone (for tests that restart or break it) and
// stops it when t ends. Missing RabbitMQ is handled as in Shared.
func Own(t testing.TB, opts Options) *Node {
	t.Helper()
	n, err := Start(context.Background(), opts)
	check(t, err)
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("rabbittest: stop node: %v", err)
		}
	})
	return n
}

func check(t testing.TB, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skipf("skipping: %v (set CI=true to make this a failure)", err)
	default:
		t.Fatalf("rabbittest: %v", err)
	}
}
