package amqp_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
)

// TestMain stops the package's RabbitMQ node and checks for leaked
// goroutines after every test ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := rabbittest.StopShared(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping RabbitMQ:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
