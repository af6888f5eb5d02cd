package pulsar_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/internal/fakepulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// TestTCK runs the contract kit three times:
//
//   - "pulsar": against a real Pulsar at PULSAR_URL (e.g.
//     pulsar://127.0.0.1:6650). This is the only run that can certify the
//     adapter; without PULSAR_URL it is skipped with "PULSAR_URL not set".
//   - "pulsartest": the real client over loopback TCP against pulsartest,
//     the project's Pulsar wire-protocol test broker. It exercises the
//     client's wire behaviour (flow permits, acks, negative acks,
//     redelivery counts, deliver-after) but is NOT Apache Pulsar.
//   - "fake": against fakepulsar, an in-process model of the client
//     interfaces. It proves the adapter's mapping onto that model and is
//     NOT a certification against Pulsar.
func TestTCK(t *testing.T) {
	t.Run("pulsar", func(t *testing.T) {
		url := os.Getenv("PULSAR_URL")
		if url == "" {
			t.Skip("PULSAR_URL not set: the Pulsar adapter is NOT certified against a real broker by this run " +
				"(start one with: docker run -d -p 6650:6650 apachepulsar/pulsar:4.0.4 bin/pulsar standalone; " +
				"then PULSAR_URL=pulsar://127.0.0.1:6650 go test ./adapters/pulsar/...)")
		}
		t.Logf("running the TCK against the Pulsar broker at %s", url)
		tck.RunWith(t, urlHarness(url), tckOptions())
	})
	t.Run("pulsartest", func(t *testing.T) {
		b, err := pulsartest.Start()
		if err != nil {
			t.Fatalf("starting the Pulsar wire-protocol test broker: %v", err)
		}
		t.Cleanup(b.Close)
		t.Logf("running the TCK with the real pulsar-client-go against pulsartest at %s — a Pulsar "+
			"wire-protocol peer written for these tests, NOT Apache Pulsar", b.URL())
		tck.RunWith(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
			h, err := urlHarness(b.URL())(ctx, t)
			if err != nil {
				return nil, err
			}
			return &peerHarness{clientHarness: h.(*clientHarness), b: b}, nil
		}, tckOptions())
	})
	t.Run("pulsartest-chunked", func(t *testing.T) {
		// Chunking on, on a broker whose max_message_size is 1 MiB: the
		// declared limit is MaxChunkedMessageBytes, and OversizedPayloadRefused
		// sends a 4 MiB payload, which goes in chunks.
		b, err := pulsartest.Start(pulsartest.WithMaxMessageSize(1 << 20))
		if err != nil {
			t.Fatalf("starting the Pulsar wire-protocol test broker: %v", err)
		}
		t.Cleanup(b.Close)
		t.Logf("running TCK cases with chunking against pulsartest at %s (max_message_size 1 MiB), NOT Apache Pulsar", b.URL())
		opts := tckOptions()
		opts.MaxPayload = 4 << 20
		tck.RunCases(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
			h, err := urlHarness(b.URL(), pulsar.Options{Chunking: true})(ctx, t)
			if err != nil {
				return nil, err
			}
			return &peerHarness{clientHarness: h.(*clientHarness), b: b}, nil
		}, opts, append(slices.Clone(tck.SecureTransportCases), "OversizedPayloadRefused")...)
	})
	t.Run("fake", func(t *testing.T) {
		t.Log("running the TCK against fakepulsar, an in-process model of the client interfaces — " +
			"NOT a Pulsar broker: this run does not certify the adapter")
		tck.RunWith(t, func(ctx context.Context, t *testing.T) (tck.Harness, error) {
			return &fakeHarness{broker: fakepulsar.New()}, nil
		}, tckOptions())
	})
}

// quiet discards the adapters' capability lines.
var quiet = slog.New(slog.DiscardHandler)

func tckOptions() tck.Options {
	return tck.Options{Extra: map[string]func(*testing.T, tck.Harness){
		"RequeueDelay_EachDispositionItsOwnDelay": extraRequeueDelay,
	}}
}

// fakeHarness: one fake broker per subtest, one fake client per adapter.
type fakeHarness struct {
	broker *fakepulsar.Broker

	mu      sync.Mutex
	clients []pulsarclient.Client
}

func (h *fakeHarness) MakeAdapter(context.Context) (ports.Adapter, error) {
	c := h.broker.NewClient()
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	return pulsar.New(context.Background(), pulsar.Options{Client: c, RequeueTick: 9 * time.Millisecond, Logger: quiet})
}

func (h *fakeHarness) FailDeadLetters(fail bool) {
	if !fail {
		h.broker.SetSendFault(nil)
		return
	}
	h.broker.SetSendFault(func(topic string, _ *pulsarclient.ProducerMessage) error {
		if strings.HasSuffix(topic, ports.DeadLetterSuffix) {
			return errors.New("injected: dead-letter topic refused the write")
		}
		return nil
	})
}

func (h *fakeHarness) FailSends(fail bool) {
	if !fail {
		h.broker.SetSendFault(nil)
		return
	}
	h.broker.SetSendFault(func(string, *pulsarclient.ProducerMessage) error {
		return errors.New("injected: broker refused the write")
	})
}

func (h *fakeHarness) Close() {
	h.mu.Lock()
	clients := h.clients
	h.mu.Unlock()
	for _, c := range clients {
		c.Close()
	}
	h.broker.Close()
}

// urlHarness connects to a Pulsar service URL. Each adapter gets its own
// client (a new "process"), wrapped so that faults can be injected on the
// client side; every run uses a fresh topic prefix.
func urlHarness(url string, opts ...pulsar.Options) tck.NewHarness {
	return func(ctx context.Context, t *testing.T) (tck.Harness, error) {
		var b [4]byte
		_, _ = rand.Read(b[:])
		h := &clientHarness{url: url, prefix: "sluice-tck-" + hex.EncodeToString(b[:]) + "-"}
		if len(opts) > 0 {
			h.opts = opts[0]
		}
		return h, nil
	}
}

type clientHarness struct {
	url    string
	prefix string
	opts   pulsar.Options // the options of every adapter besides the client and the prefix
	faults clientFaults

	mu      sync.Mutex
	clients []pulsarclient.Client
}

func (h *clientHarness) MakeAdapter(context.Context) (ports.Adapter, error) {
	c, err := pulsarclient.NewClient(pulsarclient.ClientOptions{URL: h.url, OperationTimeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	o := h.opts
	o.Client, o.TopicPrefix, o.Logger = &faultyClient{Client: c, faults: &h.faults}, h.prefix, quiet
	return pulsar.New(context.Background(), o)
}

func (h *clientHarness) FailDeadLetters(fail bool) { h.faults.deadLetters.Store(fail) }
func (h *clientHarness) FailSends(fail bool)       { h.faults.sends.Store(fail) }

func (h *clientHarness) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.clients {
		c.Close()
	}
}

// extraRequeueDelay checks that two requeues of one message, with
// different delays, are each redelivered no earlier than their own delay
// and with the count increased.
func extraRequeueDelay(t *testing.T, h tck.Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := h.MakeAdapter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close(context.Background()) }()
	var b [4]byte
	_, _ = rand.Read(b[:])
	topic := ports.Topic("tck.extra.requeue." + hex.EncodeToString(b[:]))
	s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: topic, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Stop(context.Background()) }()
	if err := a.Send(ctx, ports.Message{Topic: topic, Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	ds, err := s.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, delay := range []time.Duration{700 * time.Millisecond, 150 * time.Millisecond} {
		settled := time.Now()
		if err := s.Settle(ctx, ds, ports.Disposition{Action: ports.Requeue, Delay: delay, Reason: errors.New("again")}); err != nil {
			t.Fatal(err)
		}
		if ds, err = s.Receive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		el := time.Since(settled)
		if el < delay {
			t.Fatalf("requeue %d: redelivered after %v, before its %v delay", i+1, el, delay)
		}
		if ds[0].RedeliveryCount < i+1 {
			t.Fatalf("requeue %d: redelivery count %d", i+1, ds[0].RedeliveryCount)
		}
		t.Logf("requeue %d with delay %v redelivered after %v, count %d", i+1, delay, el.Round(time.Millisecond), ds[0].RedeliveryCount)
	}
	if err := s.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

var (
	_ tck.DeadLetterFaults = (*fakeHarness)(nil)
	_ tck.SendFaults       = (*fakeHarness)(nil)
	_ tck.DeadLetterFaults = (*clientHarness)(nil)
	_ tck.SendFaults       = (*clientHarness)(nil)
)
