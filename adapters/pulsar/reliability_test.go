package pulsar_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck/faults"
)

// TestReliability runs the fault kit with the real pulsar-client-go
// against pulsartest, the project's Pulsar wire-protocol test broker (NOT
// Apache Pulsar), a fresh broker per scenario. Connections are cut and
// stalled through the kit's loopback proxy, which rewrites the broker's
// address in lookup answers so that the client stays on the proxy; the
// consumer-kill scenario re-executes this test binary as the consumer
// process. The soak (100,000 messages) runs with:
//
//	go test -tags soak -run 'TestReliability/soak' -timeout 60m -v ./adapters/pulsar/
func TestReliability(t *testing.T) {
	faults.Run(t, faults.Target{
		Name:        "pulsar",
		Dial:        dialPulsar,
		Start:       startPulsartest,
		Position:    func(d *ports.Delivery) string { return d.Facts.Get("pulsar.message-id") },
		IgnoreLeaks: pulsarClientLeaks,
		// The rpc scenarios stop the client's reply subscription, a
		// BROADCAST instance: after its successful Unsubscribe
		// pulsar-client-go v0.19.0 never stops the partition consumer's
		// goroutines (see internal/clientleaks).
		BroadcastLeaks: []goleak.Option{
			goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).runEventsLoop"),
			goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).dispatcher"),
			goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.newAckGroupingTracker.func1"),
		},
		SoakMessages: 100_000,
		ClientRace: "a data race in pulsar-client-go v0.19.0 (partitionProducer.grabCnx writes producerName on reconnect, " +
			"producer_partition.go:348, while a concurrent send marshals it in internalSingleSend)",
	})
}

// pulsarClientLeaks are the client goroutines the fault kit ignores after
// each scenario: a closed producer's send-timeout goroutine, which
// pulsar-client-go v0.19.0 stops only at its next tick (up to SendTimeout
// after Close). Unlike the package's TestMain (internal/clientleaks), the
// kit does not ignore partition consumers' goroutines: pulsar-client-go
// leaves them running only after a successful Unsubscribe (a BROADCAST
// instance's Stop), and the kit's scenarios are LOAD_BALANCE groups, so a
// consumer left running after a scenario is one sluice did not close.
var pulsarClientLeaks = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
}

// dialPulsar makes an adapter over its own client at addr (the process
// identity is not needed: Pulsar keeps no per-client state). The client
// pings every second so that a stalled link is noticed within seconds, and
// sends time out after 2s.
func dialPulsar(_ context.Context, addr, _ string) (ports.Adapter, error) {
	c, err := pulsarclient.NewClient(pulsarclient.ClientOptions{
		URL:               "pulsar://" + addr,
		ConnectionTimeout: 2 * time.Second,
		OperationTimeout:  5 * time.Second,
		KeepAliveInterval: time.Second,
		Logger:            pulsarlog.DefaultNopLogger(),
	})
	if err != nil {
		return nil, err
	}
	a, err := pulsar.New(context.Background(), pulsar.Options{Client: &faultyClient{Client: c, faults: &reliabilityFaults}, SendTimeout: 2 * time.Second, RequeueTick: 9 * time.Millisecond, Logger: quiet})
	if err != nil {
		c.Close()
		return nil, err
	}
	return ownedClient{Adapter: a, client: c}, nil
}

// reliabilityFaults are the client-side faults of TestReliability (the
// scenarios run one at a time). A dead-letter publish is refused in the
// client, before it reaches the broker: refusing it in pulsartest
// (SEND_ERROR) makes pulsar-client-go v0.19.0 reconnect and resend, and
// that reconnect races with concurrent sends inside the client (see
// docs/reliability.md), which -race reports.
var reliabilityFaults clientFaults

// ownedClient closes the adapter's client with the adapter.
type ownedClient struct {
	*pulsar.Adapter
	client pulsarclient.Client
}

func (a ownedClient) Close(ctx context.Context) error {
	err := a.Adapter.Close(ctx)
	a.client.Close()
	return err
}

func startPulsartest(t *testing.T) *faults.Broker {
	b, err := pulsartest.Start()
	if err != nil {
		t.Fatalf("starting pulsartest: %v", err)
	}
	t.Cleanup(b.Close)
	reliabilityFaults.deadLetters.Store(false)
	var withhold atomic.Bool
	b.ControlSend(func(info pulsartest.SendInfo) pulsartest.SendFault {
		return pulsartest.SendFault{Withhold: withhold.Load() && !strings.HasSuffix(info.Topic, ports.DeadLetterSuffix)}
	})
	return &faults.Broker{
		Addr:        strings.TrimPrefix(b.URL(), "pulsar://"),
		RewriteAddr: true,
		Restart: func(context.Context) error {
			b.DropConnections()
			return nil
		},
		RestartNote: "pulsartest keeps nothing across Close, so its restart drops every connection and keeps topics, " +
			"subscriptions and unacknowledged messages: what clients see of a broker with durable storage restarting",
		FailDeadLetters: reliabilityFaults.deadLetters.Store,
		FailSends:       withhold.Store,
		FailSendsNote:   "pulsartest stores each SEND and withholds its receipt: the client's send times out (2s), the producer retries",
		// A send timeout makes pulsar-client-go reconnect the producer.
		FailSendsReconnects: true,
	}
}

// FuzzEnvelopeFromWire sends messages with arbitrary keys, properties,
// not-before guards and payloads from a plain pulsar-client-go producer
// (what a foreign or broken producer could put on the topic) through
// pulsartest to the adapter's subscription. Every one must be handed out
// — never a panic, a hang or a silent drop — with its key, payload and
// properties as headers (the adapter's own not-before guard removed), and
// the id taken from ce-id, else the Pulsar message id.
func FuzzEnvelopeFromWire(f *testing.F) {
	f.Add("k", "x-custom", "v", "", []byte("{}"))
	f.Add("", ports.HeaderID, "", "not-a-number", []byte(nil))
	f.Add("key", ports.HeaderID, "id-1", "-5", []byte("x"))
	f.Add("\xff", "x-uuid", "uuid-1", "99999999999999999999", []byte("\x00"))
	f.Add("k", ports.HeaderRedeliveryCount, "x", "1", []byte("{}"))
	b, err := pulsartest.Start()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(b.Close)
	ctx := context.Background()
	a, err := dialPulsar(ctx, strings.TrimPrefix(b.URL(), "pulsar://"), "")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = a.Close(ctx) })
	topic := ports.Topic("fuzz.wire")
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: topic, Group: "fuzz", InFlight: 4})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = sub.Stop(ctx) })
	client, err := pulsarclient.NewClient(pulsarclient.ClientOptions{URL: b.URL(), Logger: pulsarlog.DefaultNopLogger()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(client.Close)
	producer, err := client.CreateProducer(pulsarclient.ProducerOptions{Topic: physical(topic), DisableBatching: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(producer.Close)
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, key, name, value, notBefore string, payload []byte) {
		if name == kit.HeaderNotBefore || name == "fuzz-seq" {
			name = "x-" + name
		}
		if ms, err := strconv.ParseInt(notBefore, 10, 64); err == nil && ms >= 0 && time.UnixMilli(ms).After(time.Now()) {
			t.Skip("a valid not-before in the future holds the message until then (the delay contract)")
		}
		if at, err := time.Parse(time.RFC3339Nano, notBefore); err == nil && at.After(time.Now()) {
			t.Skip("a valid not-before in the future holds the message until then (the delay contract)")
		}
		mark := strconv.FormatInt(seq.Add(1), 10)
		props := map[string]string{"fuzz-seq": mark}
		if name != "" {
			props[name] = value
		}
		if notBefore != "" {
			props[kit.HeaderNotBefore] = notBefore
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		mid, err := producer.Send(sctx, &pulsarclient.ProducerMessage{Key: key, Payload: payload, Properties: props})
		if err != nil {
			t.Fatalf("plain producer send: %v", err)
		}
		var d *ports.Delivery
		for d == nil {
			ds, err := sub.Receive(sctx, 1)
			if err != nil {
				t.Fatalf("message %s (props %q) not handed out within 10s: %v", mid, props, err)
			}
			if err := sub.Settle(sctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
				t.Fatal(err)
			}
			if ds[0].Headers.Get("fuzz-seq") == mark {
				d = ds[0]
			}
		}
		if d.Key != key || string(d.Payload) != string(payload) {
			t.Fatalf("key %q payload %q, sent %q %q", d.Key, d.Payload, key, payload)
		}
		if _, ok := d.Headers.Lookup(kit.HeaderNotBefore); ok {
			t.Fatalf("the not-before guard leaked into the headers: %q", d.Headers)
		}
		if name != "" && d.Headers.Get(name) != value {
			t.Fatalf("header %q = %q, sent %q", name, d.Headers.Get(name), value)
		}
		want := "pulsar:" + mid.String()
		if id := props[ports.HeaderID]; id != "" {
			want = id
		}
		if d.ID != want {
			t.Fatalf("delivery id %q, want %q (props %q)", d.ID, want, props)
		}
	})
}

// TestTestScriptRunsBrokerRestartWithoutRace: under -race the kit skips
// Pulsar's broker-restart and send-unconfirmed (ClientRace above), so the
// test script must run them in a second go test invocation without -race,
// or they never run.
func TestTestScriptRunsBrokerRestartWithoutRace(t *testing.T) {
	b, err := os.ReadFile("../../scripts/test.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "exec" {
			f = f[1:]
		}
		if len(f) < 3 || f[0] != "go" || f[1] != "test" || slices.Contains(f, "-race") ||
			!slices.Contains(f, "./adapters/pulsar/") {
			continue
		}
		i := slices.Index(f, "-run")
		if i < 0 || i+1 >= len(f) {
			continue
		}
		pattern := strings.Trim(f[i+1], "'\"")
		for _, s := range []string{"broker-restart", "conn-reset", "send-unconfirmed"} {
			if ok, err := regexp.MatchString(pattern, "TestReliability/"+s); err != nil || !ok {
				t.Fatalf("scripts/test.sh runs pulsar without -race with -run %q, which does not select TestReliability/%s (err %v)", pattern, s, err)
			}
		}
		return
	}
	t.Fatal("scripts/test.sh has no go test of ./adapters/pulsar/ without -race running TestReliability/broker-restart: under -race the kit skips it, so it would never run")
}
