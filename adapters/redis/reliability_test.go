package redis_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/redis"
	"github.com/sluicemq/sluice/adapters/redis/redistest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// faultSwitch is the fault switch of the scenario's adapters (the
// consumer-kill child process has its own, never thrown).
var faultSwitch = &redis.Faults{}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestReliability runs the fault kit (tck/faults, zero-loss ledger, LEDGER
// lines) against a real redis-server with appendonly yes + appendfsync
// always, a fresh server per scenario. broker-restart SIGKILLs the server
// and starts it again from its append-only file on the same port; the
// connection scenarios put the kit's proxy between the adapters and the
// server; consumer-kill SIGKILLs a consumer process (this test binary
// re-executed) whose pending entries another instance then claims with
// XAUTOCLAIM after ClaimMinIdle (1s here). Soak:
//
//	go test -tags soak -run 'TestReliability/soak' -timeout 60m -v ./adapters/redis/
func TestReliability(t *testing.T) {
	faults.Run(t, faults.Target{
		Name: "redis",
		Dial: dialRedis,
		Start: func(t *testing.T) *faults.Broker {
			srv := redistest.Own(t, redistest.Options{Durable: true})
			faultSwitch.FailDeadLetters(false)
			faultSwitch.FailSends(false)
			return &faults.Broker{
				Addr:            srv.Addr,
				Restart:         srv.Restart,
				RestartNote:     "SIGKILL and start again on the same port and directory (appendfsync always: the AOF has every confirmed write)",
				FailDeadLetters: faultSwitch.FailDeadLetters,
				FailSends:       faultSwitch.FailSends,
				FailSendsNote:   "the adapter's fault switch refuses the publish before XADD: nothing is stored",
			}
		},
		Position:     func(d *ports.Delivery) string { return d.Facts.Get("stream") + "@" + d.Facts.Get("entry") },
		SoakMessages: 100_000,
	})
}

func dialRedis(ctx context.Context, addr, _ string) (ports.Adapter, error) {
	return redis.New(ctx, redis.WithFaults(redis.Options{
		Addr: addr, Namespace: "rel", ClaimMinIdle: time.Second, DialTimeout: 2 * time.Second, Logger: quietLog,
	}, faultSwitch))
}
