package kafka_test

import (
	"context"
	"testing"

	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
)

// A port where nothing listens fails New at once with ports.ErrRefused,
// not after the client's own retries and timeouts.
func TestNewRefusedFailsAtOnce(t *testing.T) {
	opentest.RefusedAtOnce(t, func(ctx context.Context, addr string) (ports.Adapter, error) {
		return kafka.New(ctx, kafka.Options{Brokers: []string{addr}})
	})
}
