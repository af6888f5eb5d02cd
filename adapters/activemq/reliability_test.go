package activemq_test

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/activemq"
	"github.com/sluicemq/sluice/adapters/activemq/activemqtest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// relFaults are the fault switches of every adapter the fault kit dials
// in this process.
var relFaults = &activemq.Faults{}

// TestReliability runs the fault kit (package tck/faults: broker restart,
// TCP reset, black hole and stall through its proxy, a SIGKILLed consumer
// process, failing dead letters and sends, panics, slow handlers, poison)
// against a real ActiveMQ of its own, with the kit's zero-loss ledger. The
// soak (100,000 messages) runs with:
//
//	go test -tags soak -run 'TestReliability/soak' -timeout 60m -v ./adapters/activemq/
func TestReliability(t *testing.T) {
	var b *activemqtest.Broker
	if os.Getenv("SLUICE_FAULTS_CHILD") == "" { // the consumer-kill child only dials
		// Started before faults.Run, so that the scenarios' leak checks
		// count only what each scenario starts.
		b = activemqtest.Own(t, activemqtest.Options{})
	}
	faults.Run(t, faults.Target{
		Name:         "activemq",
		Dial:         dialActiveMQ,
		SoakMessages: 100_000,
		Position:     func(d *ports.Delivery) string { return d.Facts.Get("message-id") },
		// The broker outlives the scenarios (started above): the JVM that
		// broker-restart starts is waited for by a goroutine of its own.
		IgnoreLeaks: []goleak.Option{
			goleak.IgnoreAnyFunction("github.com/sluicemq/sluice/adapters/activemq/activemqtest.(*Broker).launch.func1"),
			stompReceiptRace,
		},
		Start: func(t *testing.T) *faults.Broker {
			return &faults.Broker{
				Addr:    b.StompAddr,
				Restart: b.Restart,
				RestartNote: "the broker's JVM is stopped (SIGTERM: ActiveMQ's shutdown hook closes the KahaDB store) and started " +
					"again on the same port and data directory; every connection is closed",
				FailDeadLetters: relFaults.FailDeadLetters,
				FailSends:       relFaults.FailSends,
				FailSendsNote:   "each Send's STOMP transaction is aborted (ABORT with a receipt) instead of committed: the broker stores nothing",
			}
		},
	})
}

// dialActiveMQ makes an adapter at addr with fast reconnects and short
// heart-beats; ActiveMQ keeps no per-client session, so the identity is
// not needed.
func dialActiveMQ(ctx context.Context, addr, _ string) (ports.Adapter, error) {
	return activemq.New(ctx, activemq.WithFaults(activemq.Options{
		Addr:                addr,
		Namespace:           "rel",
		DialTimeout:         2 * time.Second,
		HeartBeat:           3 * time.Second,
		ReconnectBackoff:    50 * time.Millisecond,
		ReconnectMaxBackoff: time.Second,
	}, relFaults))
}

// stompReceiptRace ignores the one goroutine go-stomp 3.1.3 can leave
// behind when a connection dies (upstream defect: Conn.sendFrame queues a
// frame with a receipt on writeCh in the instant between the connection
// goroutine's exit and the connection being marked closed; the frame is
// never written, and sendFrame waits for its receipt forever). The
// adapter's caller is released by the connection's death (conn.wait).
// Only a goroutine blocked in sendFrame itself is ignored: one that has
// sendFrame deeper in its stack — the adapter's own goroutines, blocked
// on a lock or a channel of their own — still counts.
var stompReceiptRace = goleak.IgnoreTopFunction("github.com/go-stomp/stomp/v3.(*Conn).sendFrame")
