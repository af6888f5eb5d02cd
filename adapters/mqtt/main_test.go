package mqtt_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines after every test ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: errors on a successful test run:", err)
			code = 1
		}
	}
	os.Exit(code)
}
