package amqp_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// relFaults are the fault switches of every adapter the fault kit dials
// in this process.
var relFaults = &amqp.Faults{}

// TestReliability runs the fault kit (package tck/faults: restart, TCP
// reset, black hole, stall through its proxy, a SIGKILLed consumer
// process, failing dead letters and sends, panics, slow handlers, poison)
// against a real RabbitMQ node of its own, with the kit's zero-loss ledger.
// Each scenario has its own topic on that node. The soak (100,000
// messages) runs with:
//
//	go test -tags soak -run 'TestReliability/soak' -timeout 60m -v ./adapters/amqp/
func TestReliability(t *testing.T) {
	var node *rabbittest.Node
	if os.Getenv("SLUICE_FAULTS_CHILD") == "" { // the consumer-kill child only dials
		// Started before faults.Run, so that the scenarios' leak checks
		// count only what each scenario starts.
		node = rabbittest.Own(t, rabbittest.Options{})
	}
	faults.Run(t, faults.Target{
		Name:         "amqp",
		Dial:         dialAMQP,
		SoakMessages: 100_000,
		Start: func(t *testing.T) *faults.Broker {
			return &faults.Broker{
				Addr:    strings.TrimSuffix(strings.TrimPrefix(node.URL, "amqp://guest:guest@"), "/"),
				Restart: node.Restart,
				RestartNote: "rabbitmqctl stop_app, start_app: the RabbitMQ application stops (every connection is closed, " +
					"the AMQP port closes) and starts again inside the running Erlang node, keeping durable queues and persistent messages",
				Backlog: func(ctx context.Context) (string, error) {
					return node.Ctl(ctx, "list_queues", "-q", "name", "type", "messages_ready", "messages_unacknowledged")
				},
				FailDeadLetters: relFaults.FailDeadLetters,
				FailSends:       relFaults.FailSends,
				FailSendsNote: "publishes are routed, mandatory, to a key nothing is bound to: RabbitMQ returns them, " +
					"stores nothing and never confirms them",
			}
		},
	})
}

// dialAMQP makes an adapter at addr with fast reconnects; RabbitMQ keeps
// no per-client session, so the identity is not needed.
func dialAMQP(ctx context.Context, addr, _ string) (ports.Adapter, error) {
	return amqp.New(ctx, amqp.WithFaults(amqp.Options{
		URL:                 "amqp://guest:guest@" + addr + "/",
		Namespace:           "rel",
		DialTimeout:         2 * time.Second,
		Heartbeat:           2 * time.Second,
		ReconnectBackoff:    50 * time.Millisecond,
		ReconnectMaxBackoff: time.Second,
	}, relFaults))
}
