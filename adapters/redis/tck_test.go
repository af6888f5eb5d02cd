package redis_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// harness makes adapters on the package's durable redis-server under a
// namespace of its own, with shared fault switches.
type harness struct {
	addr   string
	ns     string
	faults *redis.Faults
}

func (h *harness) MakeAdapter(ctx context.Context) (ports.Adapter, error) {
	return redis.New(ctx, redis.WithFaults(redis.Options{Addr: h.addr, Namespace: h.ns}, h.faults))
}
func (h *harness) Close()                    {}
func (h *harness) FailDeadLetters(fail bool) { h.faults.FailDeadLetters(fail) }
func (h *harness) FailSends(fail bool)       { h.faults.FailSends(fail) }

var (
	_ tck.DeadLetterFaults = (*harness)(nil)
	_ tck.SendFaults       = (*harness)(nil)
)

// TestTCK runs the whole contract kit against a real redis-server with
// appendonly yes + appendfsync always (the default fsync durability). The
// adapter declares every capability the kit asks for, so no case may skip.
func TestTCK(t *testing.T) {
	srv := redistest.Shared(t)
	tck.Run(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		t.Cleanup(func() {
			// Redis has no transaction over a consumed position and
			// appended entries (TransactionalSend false).
			if t.Skipped() && !strings.HasSuffix(t.Name(), "/ExactlyOnceTransform") {
				t.Errorf("TCK case %s skipped: the redis adapter declares every other capability the kit asks for", t.Name())
			}
		})
		return &harness{addr: srv.Addr, ns: namespace("tck"), faults: &redis.Faults{}}, nil
	})
}
