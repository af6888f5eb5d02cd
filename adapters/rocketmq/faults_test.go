package rocketmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/adapters/rocketmq/rocketmqtest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// TestReliability runs the fault kit with the official v5 client against
// rocketmqtest (NOT Apache RocketMQ), a fresh peer per scenario.
// Connections are cut and stalled through the kit's loopback proxy; the
// peer answers QueryRoute with the endpoints the client asked through, so
// the client's sends and receives stay on the proxy.
func TestReliability(t *testing.T) {
	faults.Run(t, faults.Target{
		Name:        "rocketmq",
		Dial:        dialRocketMQ,
		Start:       startPeer,
		Position:    func(d *ports.Delivery) string { return d.Facts.Get(rocketmq.FactMessageID) },
		IgnoreLeaks: clientLeaks,
	})
}

func dialRocketMQ(ctx context.Context, addr, _ string) (ports.Adapter, error) {
	return rocketmq.New(ctx, rocketmq.Options{Endpoint: addr, InvisibleDuration: peerInvisible,
		AwaitDuration: time.Second, RequestTimeout: 2 * time.Second})
}

func startPeer(t *testing.T) *faults.Broker {
	b, err := rocketmqtest.Start()
	if err != nil {
		t.Fatalf("starting rocketmqtest: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return &faults.Broker{
		Addr: b.Endpoint(),
		Restart: func(context.Context) error {
			b.DropConnections()
			return nil
		},
		RestartNote: "rocketmqtest keeps nothing across Close, so its restart drops every connection and keeps topics, " +
			"groups and unacknowledged messages: what clients see of a proxy restarting in front of a durable broker",
		FailDeadLetters: func(fail bool) {
			if !fail {
				b.ControlSend(nil)
				return
			}
			b.ControlSend(func(topic string) error {
				if strings.HasSuffix(topic, "|dlq") {
					return errors.New("dead-letter publish refused by the test")
				}
				return nil
			})
		},
		FailSends:     b.RefuseSends,
		FailSendsNote: "rocketmqtest answers SendMessage INTERNAL_SERVER_ERROR and stores nothing; the client retries (3 attempts) then reports it",
	}
}

// clientLeaks are the goroutines the v5 client (v5.1.4) leaves running
// after GracefulStop: nothing in its code stops them.
var clientLeaks = []goleak.Option{
	// Each client's manager starts four loops (idle-connection check,
	// heartbeat, stats, settings sync) that sleep an initial delay and then
	// tick on a done channel that GracefulStop never closes.
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientManager).startUp.func1"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientManager).startUp.func2"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientManager).startUp.func3"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientManager).startUp.func4"),
	goleak.IgnoreTopFunction("github.com/apache/rocketmq-clients/golang/v5/pkg/ticker.Tick.func1"),
	// The Telemetry session's receive loop, polling for a stream each second.
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientSession).startUp.func1"),
	// The gRPC connections of the manager's RPC clients, closed only by the
	// idle check above (after 30 minutes), never by GracefulStop. The only
	// gRPC clients in this package are the RocketMQ client's.
	goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	// A stream's context watcher on those connections: it ends when the
	// stream ends or its connection closes. The Telemetry stream the client
	// reopens after a dropped connection is only half-closed by
	// GracefulStop (CloseSend), so its watcher outlives the consumer until
	// the peer ends the stream; it was seen once beside a CPU hog after the
	// broker-restart scenario (nothing lost).
	goleak.IgnoreAnyFunction("google.golang.org/grpc.newClientStreamWithParams.func4"),
	// The log file rotator of the client's zap logger (one per ResetLogger).
	goleak.IgnoreTopFunction("github.com/natefinch/lumberjack.(*Logger).millRun"),
}
