package activemq_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
)

// TestMain stops the package's broker (one JVM per test binary) and checks
// for leaked goroutines after every test ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := activemqtest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping ActiveMQ:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 && os.Getenv("SLUICE_FAULTS_CHILD") == "" {
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/ThreeDotsLabs/watermill/pubsub/tests.TestReconnect.func2"), stompReceiptRace); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
