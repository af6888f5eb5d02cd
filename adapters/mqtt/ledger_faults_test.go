package mqtt_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/adapters/mqtt"
	"github.com/sluicemq/sluice/adapters/mqtt/embedded"
	"github.com/sluicemq/sluice/adapters/mqtt/mqtttest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// TestLedgerFaults runs the fault kit (package tck/faults, with its
// zero-loss ledger and LEDGER lines) against a real mosquitto and against
// the embedded broker, a fresh broker per scenario. It adds the
// ledger's accounting to this package's own fault tests (reliability_test.go),
// which it does not replace: they measure MQTT-specific windows (arrivals
// before the adapter, deferred PUBACKs) that the kit does not see.
//
// A process is identified by the adapter's Options.Instance, which names
// its MQTT sessions: the consumer that replaces a killed or restarted one
// plays the same Instance and resumes its session, as a restarted pod
// would. Soaks:
//
//	go test -tags soak -run 'TestLedgerFaults/mosquitto/soak' -timeout 60m -v ./adapters/mqtt/
func TestLedgerFaults(t *testing.T) {
	t.Run("mosquitto", func(t *testing.T) {
		faults.Run(t, faults.Target{
			Name:         "mqtt-mosquitto",
			Dial:         dialMQTT(0),
			Arrivals:     arrivals,
			ClientRace:   pahoReconnectRace,
			SoakMessages: 100_000,
			Start: func(t *testing.T) *faults.Broker {
				m := mqtttest.Require(t, mqtttest.MosquittoOptions{})
				return &faults.Broker{
					Addr:        m.Addr(),
					Restart:     m.Restart,
					RestartNote: "graceful stop (SIGTERM: mosquitto writes its persistence file) and start on the same port and directory",
				}
			},
		})
	})
	t.Run("embedded", func(t *testing.T) {
		faults.Run(t, faults.Target{
			Name:         "mqtt-embedded",
			Dial:         dialMQTT(0),
			Arrivals:     arrivals,
			ClientRace:   pahoReconnectRace,
			SoakMessages: 100_000,
			Start:        startEmbedded,
		})
	})
}

// pahoReconnectRace is the upstream data race a producer reconnecting
// while it publishes triggers: under -race the kit keeps producers off
// the faulted proxy and skips broker-restart, and scripts/test.sh runs
// this package's connection scenarios again without -race.
const pahoReconnectRace = "a data race in paho.golang v0.23.0 (session/state.(*State).ConAckReceived replaces the send quota " +
	"on a reconnect, state.go:206, while a concurrent publish reads it in AddToSession, state.go:379)"

// arrivals reports every PUBLISH an adapter's subscriptions receive, before
// the adapter handles it: what lets the kit excuse a broker's loss only for
// messages that never reached the client.
func arrivals(a ports.Adapter, arrived func(id string)) {
	mqtt.SetArrivalHook(a.(*mqtt.Adapter), func(id string, _ bool) { arrived(id) })
}

// dialMQTT makes adapters with receive maximum rm (0: the adapter's
// default), playing the process named identity.
func dialMQTT(rm int) func(ctx context.Context, addr, identity string) (ports.Adapter, error) {
	return func(ctx context.Context, addr, identity string) (ports.Adapter, error) {
		return mqtt.New(ctx, mqtt.Options{
			URL: "mqtt://" + addr, Namespace: "rel", Instance: identity, ReceiveMaximum: rm, Logger: quietLog,
			ReconnectBackoff: 100 * time.Millisecond, ConnectTimeout: 2 * time.Second, KeepAlive: 2 * time.Second,
		})
	}
}

// startEmbedded starts an embedded broker whose publishes can be refused:
// dead-letter publishes, or every other publish.
func startEmbedded(t *testing.T) *faults.Broker {
	var failDLQ, failAll atomic.Bool
	b, err := embedded.Start(embedded.Options{AllowPublish: func(_, topic string) bool {
		dlq := strings.HasSuffix(topic, "/dlq")
		return !(dlq && failDLQ.Load()) && !(!dlq && failAll.Load())
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &faults.Broker{
		Addr:            b.Addr(),
		FailDeadLetters: failDLQ.Store,
		FailSends:       failAll.Store,
		FailSendsNote:   "the embedded broker answers PUBACK 0x87 (not authorized): nothing is stored",
	}
}

// TestLongMultibyteReasonIsDeadLettered: a poison message whose reason is
// longer than the 1 KiB a dead-letter reason header keeps, and made of
// multi-byte characters, must still reach the dead-letter topic. MQTT 5
// user properties must be valid UTF-8; ports.Disposition.ReasonText used
// to cut at byte 1024, inside a character, and both brokers refused the
// dead-letter publish (fixed in 7654101).
func TestLongMultibyteReasonIsDeadLettered(t *testing.T) {
	reason := "x" + strings.Repeat("é", 600) // byte 1024 falls inside an "é"
	brokers := map[string]string{}
	if m := mqtttest.Require(t, mqtttest.MosquittoOptions{}); m != nil {
		brokers["mosquitto"] = m.Addr()
	}
	b, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	brokers["embedded"] = b.Addr()
	for name, addr := range brokers {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, err := dialMQTT(0)(ctx, addr, "utf8-"+name)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = a.Close(context.Background()) }()
			topic := ports.Topic("utf8reason." + randHex())
			arrived := make(chan *ports.Delivery, 1)
			settleErrs := make(chan error, 16)
			dp := flow.New(a, ports.SubscriptionSpec{Topic: ports.DeadLetterTopic(topic), Group: "dlq"}, flow.WithErrorHandler(func(error) {}))
			flow.Sink(dp.Source(), func(_ context.Context, d *ports.Delivery) error { arrived <- d; return nil })
			p := flow.New(a, ports.SubscriptionSpec{Topic: topic, Group: "g"}, flow.WithSettleTimeout(3*time.Second), flow.WithErrorHandler(func(err error) {
				select {
				case settleErrs <- err:
				default:
				}
			}))
			flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return ports.Poison(errors.New(reason)) })
			for _, x := range []*flow.Pipeline{dp, p} {
				if err := x.Start(ctx); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = x.Stop(context.Background()) }()
			}
			if err := a.Send(ctx, ports.Message{Topic: topic, Payload: []byte("{}")}); err != nil {
				t.Fatal(err)
			}
			select {
			case d := <-arrived:
				if got := d.Headers.Get(ports.HeaderDeadLetterReason); !utf8.ValidString(got) {
					t.Fatalf("dead-lettered, but the reason header is not valid UTF-8 (%d bytes)", len(got))
				}
			case err := <-settleErrs:
				t.Fatalf("%s refused the dead-letter publish of a poison message with a long multi-byte reason, so it is never dead-lettered: %v", name, err)
			case <-ctx.Done():
				t.Fatal("the poison message never reached the dead-letter topic, and no error was reported")
			}
		})
	}
}
