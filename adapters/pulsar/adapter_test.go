package pulsar_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/kit"
	sluicepulsar "github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/internal/fakepulsar"
	"github.com/sluicemq/sluice/ports"
)

func TestRoundTripKeepsPayloadKeyAndEveryHeader(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	m := ports.Message{
		Topic: "orders", Key: "customer-7", Payload: []byte(`{"total":42}`),
		Headers: ports.NewHeaders(
			ports.HeaderType, "com.example.order.paid.v1",
			ports.HeaderRequestID, "req-1",
			ports.HeaderTenantID, "t1",
			ports.HeaderCorrelationID, "c1",
			ports.HeaderTraceParent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"x-custom", "v",
		),
	}
	send(t, a, m)
	d := receiveN(t, s, 1)[0]
	for _, hdr := range m.Headers {
		k, v := hdr.Name, hdr.Value
		if d.Headers.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, d.Headers.Get(k), v)
		}
	}
	if d.ID == "" || d.Headers.Get(ports.HeaderID) != d.ID {
		t.Errorf("stamped headers missing: id=%q headers=%v", d.ID, d.Headers)
	}
	if d.Headers.Get(ports.HeaderPartitionKey) != "customer-7" || d.Key != "customer-7" {
		t.Errorf("key = %q, partition key header = %q, want customer-7", d.Key, d.Headers.Get(ports.HeaderPartitionKey))
	}
	if d.Topic != "orders" || string(d.Payload) != `{"total":42}` || d.RedeliveryCount != 0 {
		t.Errorf("delivery = topic %q payload %s count %d", d.Topic, d.Payload, d.RedeliveryCount)
	}
	if d.Facts.Get("pulsar.topic") != physical("orders") || d.Facts.Get("pulsar.subscription") != "billing" || d.Facts.Get("pulsar.message-id") == "" {
		t.Errorf("facts = %v", d.Facts)
	}
	if m.Headers.Get(ports.HeaderID) != "" {
		t.Error("Send modified the caller's headers")
	}
}

func TestTopicMappingUsesNamespaceAndPrefix(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter(sluicepulsar.Options{Tenant: "acme", Namespace: "prod", TopicPrefix: "svc-"})
	if got, want := a.PhysicalTopic("orders"), "persistent://acme/prod/svc-orders"; got != want {
		t.Fatalf("PhysicalTopic = %q, want %q", got, want)
	}
	send(t, a, msg("orders", "m1"))
	if sends := ops(env.broker, fakepulsar.OpSend, "persistent://acme/prod/svc-orders"); len(sends) != 1 {
		t.Fatalf("sends to the mapped topic = %d, want 1", len(sends))
	}
}

func TestLoadBalanceSharesOneGroup(t *testing.T) {
	env := newFakeEnv(t)
	spec := ports.SubscriptionSpec{Topic: "jobs", Group: "workers", InFlight: 2}
	s1 := subscribe(t, env.adapter(), spec)
	s2 := subscribe(t, env.adapter(), spec)
	pub := env.adapter()
	const n = 10
	for i := range n {
		send(t, pub, msg("jobs", "j"+strconv.Itoa(i)))
	}
	// Both instances consume concurrently until the group has handled n.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	per := map[int]int{}
	var wg sync.WaitGroup
	for i, s := range []ports.Subscription{s1, s2} {
		wg.Go(func() {
			for {
				ds, err := s.Receive(ctx, 2)
				if err != nil {
					return
				}
				if err := s.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
					t.Errorf("ack: %v", err)
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.ID]++
				}
				per[i] += len(ds)
				if len(seen) == n {
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("handled %d distinct messages, want %d: %v", len(seen), n, seen)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("%s handled %d times", id, c)
		}
	}
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("one instance got nothing: %v", per)
	}
	if subs := env.broker.Subscriptions(physical("jobs")); len(subs) != 1 || subs[0] != "workers" {
		t.Fatalf("subscriptions = %v, want [workers]", subs)
	}
}

func TestBroadcastGivesEveryInstanceACopyAndRemovesItOnStop(t *testing.T) {
	env := newFakeEnv(t)
	spec := ports.SubscriptionSpec{Topic: "prices", Mode: ports.Broadcast, Group: "cache"}
	s1 := subscribe(t, env.adapter(), spec)
	s2 := subscribe(t, env.adapter(), spec)
	send(t, env.adapter(), msg("prices", "p1"))
	for _, s := range []ports.Subscription{s1, s2} {
		if d := receiveN(t, s, 1)[0]; d.ID != "p1" {
			t.Fatalf("got %s, want p1", d.ID)
		}
	}
	if subs := env.broker.Subscriptions(physical("prices")); len(subs) != 2 {
		t.Fatalf("subscriptions = %v, want one per instance", subs)
	}
	stop(t, s1)
	stop(t, s2)
	if subs := env.broker.Subscriptions(physical("prices")); len(subs) != 0 {
		t.Fatalf("per-instance subscriptions left after Stop: %v", subs)
	}
	if acks := ops(env.broker, fakepulsar.OpAck, ""); len(acks) != 0 {
		t.Fatalf("Stop acknowledged: %+v", acks)
	}
}

func TestBroadcastInstanceWithTTLIsKeptAndResumed(t *testing.T) {
	env := newFakeEnv(t)
	spec := ports.SubscriptionSpec{Topic: "prices", Mode: ports.Broadcast, Group: "cache", Instance: "node-1", InstanceTTL: time.Hour}
	s := subscribe(t, env.adapter(), spec)
	stop(t, s)
	if subs := env.broker.Subscriptions(physical("prices")); len(subs) != 1 || subs[0] != "cache.node-1" {
		t.Fatalf("subscriptions = %v, want [cache.node-1] kept", subs)
	}
	send(t, env.adapter(), msg("prices", "p1"))
	if d := receiveN(t, subscribe(t, env.adapter(), spec), 1)[0]; d.ID != "p1" {
		t.Fatalf("resumed instance got %s, want p1", d.ID)
	}
}

func TestGroupBacklogIsKeptWhileNoInstanceRuns(t *testing.T) {
	env := newFakeEnv(t)
	spec := ports.SubscriptionSpec{Topic: "jobs", Group: "workers"}
	stop(t, subscribe(t, env.adapter(), spec))
	send(t, env.adapter(), msg("jobs", "j1"))
	if d := receiveN(t, subscribe(t, env.adapter(), spec), 1)[0]; d.ID != "j1" {
		t.Fatalf("got %s, want j1", d.ID)
	}
}

func TestDelayIsNativeAndGuardedAgainstEarlyDispatch(t *testing.T) {
	env := newFakeEnv(t)
	// A non-strict broker may dispatch a delayed message up to a tick early.
	env.broker.SetEarlyDelivery(time.Hour)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "reminders", Group: "g"})
	m := msg("reminders", "r1")
	m.Delay = 150 * time.Millisecond
	sent := time.Now()
	send(t, a, m)
	send(t, a, msg("reminders", "now"))

	first := receiveN(t, s, 1)[0]
	if first.ID != "now" {
		t.Fatalf("first delivery %s, want the undelayed message", first.ID)
	}
	d := receiveN(t, s, 1)[0]
	if el := time.Since(sent); d.ID != "r1" || el < m.Delay {
		t.Fatalf("got %s after %v, want r1 no earlier than %v", d.ID, el, m.Delay)
	}
	if _, leaked := d.Headers.Lookup(kit.HeaderNotBefore); leaked {
		t.Error("the not-before guard leaked into the headers")
	}
	sends := ops(env.broker, fakepulsar.OpSend, physical("reminders"))
	if len(sends) != 2 {
		t.Fatalf("sends = %d", len(sends))
	}
}

func TestSendReportsEachUnconfirmedMessage(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	refused := errors.New("quota exceeded")
	env.broker.SetSendFault(func(topic string, _ *pulsar.ProducerMessage) error {
		if topic == physical("b") {
			return refused
		}
		return nil
	})
	err := a.Send(ctxT(t), msg("a", "1"), msg("b", "2"), msg("a", "3"), ports.Message{Topic: "bad topic!"})
	var se []*ports.SendError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var s *ports.SendError
		if !errors.As(e, &s) {
			t.Fatalf("not a SendError: %v", e)
		}
		se = append(se, s)
	}
	if len(se) != 2 {
		t.Fatalf("Send errors = %v, want two", err)
	}
	byIndex := map[int]*ports.SendError{}
	for _, s := range se {
		byIndex[s.Index] = s
	}
	if s := byIndex[1]; s == nil || !errors.Is(s, ports.ErrUnconfirmed) || !errors.Is(s, refused) || s.Topic != "b" {
		t.Fatalf("error for #1 = %v, want unconfirmed with the cause", s)
	}
	if s := byIndex[3]; s == nil || !errors.Is(s, ports.ErrInvalid) {
		t.Fatalf("error for #3 = %v, want invalid", s)
	}
	if got := len(ops(env.broker, fakepulsar.OpSend, physical("a"))); got != 2 {
		t.Fatalf("confirmed sends to a = %d, want 2", got)
	}
}

func TestReceiveReturnsAtMostMax(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "jobs", Group: "g", InFlight: 4})
	var msgs []ports.Message
	for i := range 8 {
		msgs = append(msgs, msg("jobs", "j"+strconv.Itoa(i)))
	}
	send(t, a, msgs...)
	total := 0
	for total < 8 {
		ds, err := s.Receive(ctxT(t), 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 || len(ds) > 3 {
			t.Fatalf("Receive(max 3) returned %d", len(ds))
		}
		total += len(ds)
		if err := s.Settle(ctxT(t), ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClosedAdapterRefusesWork(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "jobs", Group: "g"})
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := a.Send(ctxT(t), msg("jobs", "j")); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	if _, err := a.Subscribe(ctxT(t), ports.SubscriptionSpec{Topic: "jobs", Group: "g"}); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Subscribe after Close = %v", err)
	}
	if _, err := s.Receive(ctxT(t), 1); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Receive after Close = %v", err)
	}
}

func TestSubscribeErrors(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	if _, err := a.Subscribe(ctxT(t), ports.SubscriptionSpec{Topic: "jobs"}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("LOAD_BALANCE without group = %v, want ErrInvalid", err)
	}
	down := errors.New("broker unavailable")
	env.broker.SetSubscribeFault(func(pulsar.ConsumerOptions) error { return down })
	if _, err := a.Subscribe(ctxT(t), ports.SubscriptionSpec{Topic: "jobs", Group: "g"}); !errors.Is(err, down) {
		t.Fatalf("Subscribe with a failing broker = %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	bad := map[string]sluicepulsar.Options{
		"url":       {URL: "http://x"},
		"namespace": {Tenant: "a/b", Namespace: "c"},
		"prefix":    {TopicPrefix: "a b"},
		"send":      {SendTimeout: -1},
		"op":        {OperationTimeout: -1},
		"tick":      {RequeueTick: time.Millisecond},
		"existing":  {Existing: []sluicepulsar.Existing{{Topic: "a", Physical: "orders"}}},
	}
	for name, o := range bad {
		if _, err := sluicepulsar.New(context.Background(), o); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
	}
}

// blockingClient's CreateProducer blocks until released, as the real
// client's does while it cannot reach a broker.
type blockingClient struct {
	pulsar.Client
	release chan struct{}
}

func (c *blockingClient) CreateProducer(o pulsar.ProducerOptions) (pulsar.Producer, error) {
	<-c.release
	return c.Client.CreateProducer(o)
}

func TestSendIsBoundedByContextWhileTheProducerIsCreated(t *testing.T) {
	env := newFakeEnv(t)
	bc := &blockingClient{Client: env.broker.NewClient(), release: make(chan struct{})}
	defer bc.Close()
	a, err := sluicepulsar.New(context.Background(), sluicepulsar.Options{Client: bc, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = a.Send(ctx, msg("orders", "m1"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send while the producer is being created = %v, want the context's deadline", err)
	}
	close(bc.release) // the creation finishes; Close waits for it and closes the producer
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if sends := ops(env.broker, fakepulsar.OpSend, ""); len(sends) != 0 {
		t.Fatalf("a send timed out by its context still reached the broker: %+v", sends)
	}
}

// Classify gives the client's results their portable codes, by type.
func TestClassify(t *testing.T) {
	a := newFakeEnv(t).adapter()
	for _, c := range []struct {
		err       error
		code      error
		retryable bool
	}{
		{fmt.Errorf("%w: %w", ports.ErrUnconfirmed, pulsar.ErrSendTimeout), ports.ErrTimeout, true},
		{pulsar.ErrMessageTooLarge, ports.ErrTooLarge, false},
		{pulsar.ErrProducerClosed, ports.ErrClosed, false},
		{pulsar.ErrTopicNotfound, ports.ErrNotFound, false},
		{fmt.Errorf("%w: injected", ports.ErrUnconfirmed), ports.ErrUnconfirmed, true},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, ports.ErrRefused, true},
		{errors.New("something else"), nil, false},
	} {
		got := a.Driver().Classify(c.err)
		if got.Code != c.code || got.Retryable != c.retryable {
			t.Errorf("Classify(%v) = %v retryable %v, want %v retryable %v", c.err, got.Code, got.Retryable, c.code, c.retryable)
		}
	}
}
