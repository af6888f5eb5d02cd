package pulsar_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/internal/fakepulsar"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pulsar-client-go v0.19.0, with a real client (PULSAR_URL or a
		// wire-protocol test broker): a closed producer's send-timeout
		// goroutine exits only at its next tick, up to SendTimeout later.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
		// pulsar-client-go v0.19.0: after a successful Consumer.Unsubscribe
		// (a BROADCAST instance's Stop) the partition consumer is marked
		// closed, so its Close returns early and these goroutines are never
		// stopped (consumer_partition.go internalUnsubscribe / Close). An
		// upstream leak of three goroutines per stopped instance.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).runEventsLoop"),
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).dispatcher"),
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.newAckGroupingTracker.func1"),
		// pulsar-client-go v0.19.0: every chunked message received starts
		// a goroutine that sleeps ExpireTimeOfIncompleteChunk (a minute)
		// and is not stopped when the message completes or the consumer
		// closes (consumer_partition.go discardChunkIfExpire). Upstream;
		// it ends on its own.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*chunkedMsgCtxMap).discardChunkIfExpire"),
		// pulsar-client-go v0.19.0: a consumer that (re)connects tells its
		// dispatcher from a goroutine of its own, `go func() {
		// pc.connectedCh <- struct{}{} }()` (consumer_partition.go
		// grabConn); when the consumer is closed before the dispatcher
		// reads it, that send blocks for the process's life. Seen beside a
		// CPU hog; upstream.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionConsumer).grabConn.func1"),
	)
}

// wait bounds every blocking step of a test.
const wait = 10 * time.Second

// fakeEnv is one fake broker and the adapters ("processes") made on it.
type fakeEnv struct {
	t      *testing.T
	broker *fakepulsar.Broker
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	b := fakepulsar.New()
	t.Cleanup(b.Close)
	return &fakeEnv{t: t, broker: b}
}

// adapter makes a new adapter over its own fake client.
func (e *fakeEnv) adapter(opts ...pulsar.Option) *pulsar.Adapter {
	e.t.Helper()
	client := e.broker.NewClient()
	all := append([]pulsar.Option{pulsar.WithClient(client), pulsar.WithRequeueTick(9 * time.Millisecond)}, opts...)
	a, err := pulsar.New(all...)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			e.t.Errorf("Close: %v", err)
		}
		client.Close()
	})
	return a
}

// topic is the physical topic of logical topic t under the default naming.
func physical(t ports.Topic) string { return "persistent://public/default/" + string(t) }

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func subscribe(t *testing.T, a *pulsar.Adapter, spec ports.SubscriptionSpec) ports.Subscription {
	t.Helper()
	s, err := a.Subscribe(ctxT(t), spec)
	if err != nil {
		t.Fatalf("Subscribe(%+v): %v", spec, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

func send(t *testing.T, a *pulsar.Adapter, msgs ...ports.Message) {
	t.Helper()
	if err := a.Send(ctxT(t), msgs...); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// receiveN receives exactly n deliveries (one Receive may return several).
func receiveN(t *testing.T, s ports.Subscription, n int) []*ports.Delivery {
	t.Helper()
	ctx := ctxT(t)
	var out []*ports.Delivery
	for len(out) < n {
		ds, err := s.Receive(ctx, n-len(out))
		if err != nil {
			t.Fatalf("Receive after %d of %d deliveries: %v", len(out), n, err)
		}
		out = append(out, ds...)
	}
	return out
}

// receiveNone asserts that nothing arrives within d.
func receiveNone(t *testing.T, s ports.Subscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if ds, err := s.Receive(ctx, 10); err == nil {
		t.Fatalf("expected nothing within %v, got %d deliveries (first %s)", d, len(ds), ds[0].ID)
	}
}

func msg(topic ports.Topic, id string) ports.Message {
	return ports.Message{Topic: topic, Payload: []byte(`{"n":"` + id + `"}`), Headers: ports.Headers{ports.HeaderID: id}}
}

// ops filters the broker's events by op (and topic when not empty).
func ops(b *fakepulsar.Broker, op fakepulsar.Op, topic string) []fakepulsar.Event {
	var out []fakepulsar.Event
	for _, e := range b.Events() {
		if e.Op == op && (topic == "" || e.Topic == topic) {
			out = append(out, e)
		}
	}
	return out
}

func stop(t *testing.T, s ports.Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}
