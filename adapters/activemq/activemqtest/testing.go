package activemqtest

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
)

var shared struct {
	once   sync.Once
	broker *Broker
	err    error
}

// Shared returns the test binary's broker, starting it on first use (one
// JVM start per test binary). A test binary that calls Shared must call
// StopShared from TestMain after m.Run.
//
// When ActiveMQ is not installed, Shared skips t with the reason — or fails
// it when the environment variable CI is "true", where a missing broker is
// an error. A broker that fails to start always fails t.
func Shared(t testing.TB) *Broker {
	t.Helper()
	shared.once.Do(func() {
		shared.broker, shared.err = Start(context.Background(), Options{})
	})
	check(t, shared.err)
	return shared.broker
}

// StopShared stops the broker started by Shared, if any.
func StopShared() error {
	if shared.broker == nil {
		return nil
	}
	return shared.broker.Stop()
}

// Own starts a broker for t alone (for tests that restart or break it)
// and stops it when t ends. Missing ActiveMQ is handled as in Shared.
func Own(t testing.TB, opts Options) *Broker {
	t.Helper()
	b, err := Start(context.Background(), opts)
	check(t, err)
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("activemqtest: stop broker: %v", err)
		}
	})
	return b
}

func check(t testing.TB, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true":
		t.Skipf("skipping: %v (set CI=true to make this a failure)", err)
	default:
		t.Fatalf("activemqtest: %v", err)
	}
}
