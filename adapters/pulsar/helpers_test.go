package pulsar_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/internal/clientleaks"
	"github.com/sluicemq/sluice/adapters/pulsar/internal/fakepulsar"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) {
	// With a real client (PULSAR_URL or a wire-protocol test broker):
	// pulsar-client-go's own leaks, named in clientleaks.
	goleak.VerifyTestMain(m, clientleaks.Ignore...)
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
// opts, when given, are the options besides the client (RequeueTick 9ms
// unless set).
func (e *fakeEnv) adapter(opts ...pulsar.Options) *pulsar.Adapter {
	e.t.Helper()
	client := e.broker.NewClient()
	var o pulsar.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Client = client
	if o.Logger == nil {
		o.Logger = quiet
	}
	if o.RequeueTick == 0 {
		o.RequeueTick = 9 * time.Millisecond
	}
	a, err := pulsar.New(context.Background(), o)
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
	return ports.Message{Topic: topic, Payload: []byte(`{"n":"` + id + `"}`), Headers: ports.NewHeaders(ports.HeaderID, id)}
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
