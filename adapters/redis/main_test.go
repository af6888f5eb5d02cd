package redis_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/redis/redistest"
)

// TestMain stops the package's redis-server and checks for leaked
// goroutines after every test ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := redistest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping redis-server:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/ThreeDotsLabs/watermill/pubsub/tests.TestReconnect.func2")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
