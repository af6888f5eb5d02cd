package rocketmq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
)

// The v5 client logs through a package-level zap logger into
// $rocketmq.client.logRoot/rocketmq_client_go.log, by default under
// /logs/rocketmqlogs (it reads the Java-style "user.home" variable, which
// is never set in a Go process). Unless the process chose a log root, the
// adapter moves that file to the temporary directory and keeps only
// warnings and errors; set rocketmq.client.logRoot (and
// rocketmq.client.logLevel) in the environment to choose otherwise.
func init() {
	root, level := os.Getenv(rmq.CLIENT_LOG_ROOT), os.Getenv(rmq.CLIENT_LOG_LEVEL)
	if root == "" {
		_ = os.Setenv(rmq.CLIENT_LOG_ROOT, filepath.Join(os.TempDir(), "rocketmqlogs"))
	}
	if level == "" {
		_ = os.Setenv(rmq.CLIENT_LOG_LEVEL, "warn")
	}
	if root == "" || level == "" {
		rmq.ResetLogger()
	}
}

func (c *conn) clientConfig(group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      c.o.Endpoint,
		NameSpace:     c.o.Namespace,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{AccessKey: c.o.AccessKey, AccessSecret: c.o.AccessSecret},
	}
}

// starter is a client's Start and GracefulStop.
type starter interface {
	Start() error
	GracefulStop() error
}

// start runs s.Start within ctx. The v5 client's Start blocks until the
// proxy's Telemetry settings arrive and has no context; when ctx ends
// first, start returns an error and stops the client once Start returns.
func start(ctx context.Context, s starter, what, endpoint string) error {
	done := make(chan error, 1)
	go func() { done <- s.Start() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("rocketmq: start %s at %s: %w (check that a RocketMQ 5 proxy serves gRPC there and the topic exists)", what, endpoint, err)
		}
		return nil
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				_ = s.GracefulStop()
			}
		}()
		return fmt.Errorf("rocketmq: start %s at %s: %w: no settings from the proxy in time (check the endpoint, TLS (the client dials TLS unless rocketmq.client.enableSsl=false) and that the proxy is a RocketMQ 5 gRPC proxy)", what, endpoint, ctx.Err())
	}
}
