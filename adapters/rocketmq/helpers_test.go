package rocketmq_test

import (
	"os"
	"testing"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

func TestMain(m *testing.M) {
	// Keep the client's log file out of the way of other runs.
	dir, err := os.MkdirTemp("", "sluice-rocketmq-clientlog-")
	if err != nil {
		panic(err)
	}
	os.Setenv(rmq.CLIENT_LOG_ROOT, dir)
	rmq.ResetLogger()
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
