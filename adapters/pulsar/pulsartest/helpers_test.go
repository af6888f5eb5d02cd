package pulsartest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/pulsar/internal/clientleaks"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
)

// wait bounds every receive and condition wait in these tests.
const wait = 10 * time.Second

// msTick is one millisecond, for short negative waits.
const msTick = time.Millisecond

func TestMain(m *testing.M) {
	// The client's leaks, not the broker's (clientleaks names them).
	goleak.VerifyTestMain(m, clientleaks.Ignore...)
}

// startBroker starts a broker that logs to t and closes with the test.
func startBroker(t *testing.T, opts ...pulsartest.Option) *pulsartest.Broker {
	t.Helper()
	b, err := pulsartest.Start(append([]pulsartest.Option{pulsartest.WithLogf(t.Logf)}, opts...)...)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// newClient connects a plain pulsar-client-go client to b; it is closed
// with the test, before the broker.
func newClient(t *testing.T, b *pulsartest.Broker) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{
		URL:               b.URL(),
		ConnectionTimeout: 5 * time.Second,
		OperationTimeout:  wait,
		Logger:            log.DefaultNopLogger(),
		MetricsRegisterer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// topicName returns a topic unique to the test.
func topicName(t *testing.T) string {
	return "persistent://public/default/" + strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
}

func newProducer(t *testing.T, c pulsar.Client, opts pulsar.ProducerOptions) pulsar.Producer {
	t.Helper()
	p, err := c.CreateProducer(opts)
	if err != nil {
		t.Fatalf("CreateProducer: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// subscribe makes a consumer that the test closes at its end unless the
// test closed it first (Close is idempotent).
func subscribe(t *testing.T, c pulsar.Client, opts pulsar.ConsumerOptions) pulsar.Consumer {
	t.Helper()
	cons, err := c.Subscribe(opts)
	if err != nil {
		t.Fatalf("Subscribe %q: %v", opts.SubscriptionName, err)
	}
	t.Cleanup(cons.Close)
	return cons
}

func send(t *testing.T, p pulsar.Producer, msg *pulsar.ProducerMessage) pulsar.MessageID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	id, err := p.Send(ctx, msg)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	return id
}

// receive waits up to wait for the next message.
func receive(t *testing.T, c pulsar.Consumer) pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m, err := c.Receive(ctx)
	if err != nil {
		t.Fatalf("Receive on %q: %v (no message within %v)", c.Subscription(), err, wait)
	}
	return m
}

// receiveNone asserts that no message arrives within d.
func receiveNone(t *testing.T, c pulsar.Consumer, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := c.Receive(ctx)
	if err == nil {
		t.Fatalf("unexpected message %q (redelivery %d)", m.Payload(), m.RedeliveryCount())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive: %v", err)
	}
}

func ack(t *testing.T, c pulsar.Consumer, m pulsar.Message) {
	t.Helper()
	if err := c.Ack(m); err != nil {
		t.Fatalf("Ack %q: %v", m.Payload(), err)
	}
}

// eventually polls cond until it holds or wait passes; it is a bounded
// wait on broker state, not a sleep standing in for synchronisation.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", wait, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// backlog returns the subscription's backlog, failing if it does not exist.
func backlog(t *testing.T, b *pulsartest.Broker, topic, sub string) int {
	t.Helper()
	st, ok := b.Subscription(topic, sub)
	if !ok {
		t.Fatalf("subscription %q on %s does not exist", sub, topic)
	}
	return st.Backlog
}
