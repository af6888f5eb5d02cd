package wmbridge_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/mem"
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every blocking step of the tests.
const wait = 5 * time.Second

func newMem(t *testing.T) *mem.Adapter {
	t.Helper()
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	a, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.Close(context.Background())
		_ = b.Close(context.Background())
	})
	return a
}

func subscribe(t *testing.T, s *wmbridge.Subscriber, topic string) <-chan *message.Message {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msgs, err := s.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func next(t *testing.T, msgs <-chan *message.Message, what string) *message.Message {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatalf("%s: the subscription's channel closed", what)
		}
		return m
	case <-time.After(wait):
		t.Fatalf("%s: nothing arrived within %v", what, wait)
	}
	return nil
}

func nothing(t *testing.T, msgs <-chan *message.Message, within time.Duration, what string) {
	t.Helper()
	select {
	case m := <-msgs:
		t.Fatalf("%s: got %s %q", what, m.UUID, m.Payload)
	case <-time.After(within):
	}
}

// A published message arrives with its UUID, payload and metadata, and a
// sluice consumer sees the UUID as the envelope id.
func TestPublishSubscribeRoundTrip(t *testing.T) {
	a := newMem(t)
	sub := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "g"})
	defer sub.Close()
	if err := sub.SubscribeInitialize("orders"); err != nil {
		t.Fatal(err)
	}
	pub := wmbridge.NewPublisher(a)
	m := message.NewMessage("id-1", []byte(`{"n":1}`))
	m.Metadata.Set("x-user", "alice")
	m.Metadata.Set(ports.HeaderPartitionKey, "k1")
	m.Metadata.Set(ports.HeaderID, "stale-id-of-an-earlier-hop")
	if err := pub.Publish("orders", m); err != nil {
		t.Fatal(err)
	}
	got := next(t, subscribe(t, sub, "orders"), "published message")
	if got.UUID != "id-1" || string(got.Payload) != `{"n":1}` || got.Metadata.Get("x-user") != "alice" || got.Metadata.Get(ports.HeaderID) != "id-1" {
		t.Fatalf("got %s %q %v", got.UUID, got.Payload, got.Metadata)
	}
	if got.Metadata.Get(ports.HeaderRedeliveryCount) != "" {
		t.Fatalf("first delivery carries redelivery count %q", got.Metadata.Get(ports.HeaderRedeliveryCount))
	}
	got.Ack()

	conv := wmbridge.Messages("orders", m)
	if conv[0].Key != "k1" || conv[0].Headers.Get(ports.HeaderID) != "id-1" || conv[0].Topic != "orders" {
		t.Fatalf("Messages: %+v", conv[0])
	}
}

// An acked message is not redelivered, to this subscriber or to the
// group's next one.
func TestAckIsFinal(t *testing.T) {
	a := newMem(t)
	sub := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "g"})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	msgs := subscribe(t, sub, "t")
	if err := wmbridge.NewPublisher(a).Publish("t", message.NewMessage("a", []byte("1"))); err != nil {
		t.Fatal(err)
	}
	next(t, msgs, "message").Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	again := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "g"})
	defer again.Close()
	nothing(t, subscribe(t, again, "t"), 200*time.Millisecond, "acked message redelivered")
}

// A nack requeues the message with its redelivery count, no earlier than
// NackDelay.
func TestNackRequeuesWithCountAfterDelay(t *testing.T) {
	a := newMem(t)
	const delay = 150 * time.Millisecond
	sub := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "g", NackDelay: delay})
	defer sub.Close()
	msgs := subscribe(t, sub, "t")
	if err := wmbridge.NewPublisher(a).Publish("t", message.NewMessage("n", []byte("1"))); err != nil {
		t.Fatal(err)
	}
	first := next(t, msgs, "first delivery")
	nacked := time.Now()
	first.Nack()
	second := next(t, msgs, "redelivery after a nack")
	if since := time.Since(nacked); since < delay {
		t.Fatalf("redelivered %v after the nack, want at least NackDelay %v", since, delay)
	}
	if second.UUID != "n" || second.Metadata.Get(ports.HeaderRedeliveryCount) != "1" {
		t.Fatalf("redelivery %s with count %q, want n with 1", second.UUID, second.Metadata.Get(ports.HeaderRedeliveryCount))
	}
	second.Ack()
}

// NackBackoff paces redeliveries as the spec's retry policy does: the
// second redelivery waits Backoff·Multiplier.
func TestNackBackoffGrows(t *testing.T) {
	a := newMem(t)
	sub := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "g",
		NackBackoff: &ports.RetryPolicy{Backoff: 50 * time.Millisecond, Multiplier: 3, MaxBackoff: time.Second, NoJitter: true}})
	defer sub.Close()
	msgs := subscribe(t, sub, "t")
	if err := wmbridge.NewPublisher(a).Publish("t", message.NewMessage("b", []byte("1"))); err != nil {
		t.Fatal(err)
	}
	m := next(t, msgs, "first delivery")
	for i, want := range []time.Duration{50 * time.Millisecond, 150 * time.Millisecond} {
		at := time.Now()
		m.Nack()
		m = next(t, msgs, "redelivery")
		if since := time.Since(at); since < want {
			t.Fatalf("redelivery %d after %v, want at least %v", i+1, since, want)
		}
	}
	m.Ack()
}

// Close hands an unsettled message back: the group's next subscriber gets
// it, and the closed subscriber's channel is closed.
func TestCloseHandsBackUnsettled(t *testing.T) {
	a := newMem(t)
	sub := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "g"})
	msgs := subscribe(t, sub, "t")
	if err := wmbridge.NewPublisher(a).Publish("t", message.NewMessage("u", []byte("1"))); err != nil {
		t.Fatal(err)
	}
	held := next(t, msgs, "message")
	done := make(chan error, 1)
	go func() { done <- sub.Close() }()
	select {
	case <-held.Context().Done():
	case <-time.After(wait):
		t.Fatal("Close did not end the handed-out message's context")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Close did not return")
	}
	if _, ok := <-msgs; ok {
		t.Fatal("channel still open after Close")
	}
	held.Ack() // too late: Close settled nothing
	if _, err := sub.Subscribe(context.Background(), "t"); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ports.ErrClosed", err)
	}
	again := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "g"})
	defer again.Close()
	m := next(t, subscribe(t, again, "t"), "message handed back by Close")
	if m.UUID != "u" {
		t.Fatalf("got %s", m.UUID)
	}
	m.Ack()
}

// InFlight bounds what a Subscribe hands out unsettled.
func TestInFlightBound(t *testing.T) {
	a := newMem(t)
	sub := wmbridge.NewSubscriber(a, wmbridge.SubscriberConfig{Group: "g", InFlight: 2})
	defer sub.Close()
	msgs := subscribe(t, sub, "t")
	pub := wmbridge.NewPublisher(a)
	for _, id := range []string{"1", "2", "3"} {
		if err := pub.Publish("t", message.NewMessage(id, nil)); err != nil {
			t.Fatal(err)
		}
	}
	m1, m2 := next(t, msgs, "first"), next(t, msgs, "second")
	nothing(t, msgs, 100*time.Millisecond, "a third message with two unsettled and InFlight 2")
	m1.Ack()
	m3 := next(t, msgs, "third, after an ack")
	m2.Ack()
	m3.Ack()
}

// Publish after Close fails with ports.ErrClosed; a failed Send is
// returned.
func TestPublisherErrors(t *testing.T) {
	a := newMem(t)
	pub := wmbridge.NewPublisher(a)
	if err := pub.Publish("nobody-listens", message.NewMessage("x", nil)); !errors.Is(err, ports.ErrNoSubscriber) {
		t.Fatalf("Publish with no group: %v, want ports.ErrNoSubscriber", err)
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", message.NewMessage("x", nil)); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Publish after Close: %v, want ports.ErrClosed", err)
	}
}

// poisonAdapter marks deliveries whose "poison" header is set as
// unreadable, as an adapter does when it cannot decode an envelope, and
// records settlements.
type poisonAdapter struct {
	*mem.Adapter
	mu      sync.Mutex
	settled []ports.Disposition
}

func (p *poisonAdapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	s, err := p.Adapter.Subscribe(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &poisonSub{Subscription: s, p: p}, nil
}

type poisonSub struct {
	ports.Subscription
	p *poisonAdapter
}

func (s *poisonSub) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	ds, err := s.Subscription.Receive(ctx, max)
	for _, d := range ds {
		if d.Headers.Get("poison") != "" {
			d.Err = errors.New("malformed envelope")
		}
	}
	return ds, err
}

func (s *poisonSub) Settle(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	s.p.mu.Lock()
	s.p.settled = append(s.p.settled, disp)
	s.p.mu.Unlock()
	return s.Subscription.Settle(ctx, ds, disp)
}

// An unreadable delivery is dead-lettered as poison and reported, and
// Watermill never sees it.
func TestUnreadableDeliveryIsDeadLettered(t *testing.T) {
	pa := &poisonAdapter{Adapter: newMem(t)}
	reported := make(chan error, 4)
	sub := wmbridge.NewSubscriber(pa, wmbridge.SubscriberConfig{Group: "g", OnError: func(err error) { reported <- err }})
	defer sub.Close()
	msgs := subscribe(t, sub, "t")
	bad := message.NewMessage("bad", nil)
	bad.Metadata.Set("poison", "yes")
	pub := wmbridge.NewPublisher(pa)
	if err := pub.Publish("t", bad, message.NewMessage("good", nil)); err != nil {
		t.Fatal(err)
	}
	m := next(t, msgs, "the readable message")
	if m.UUID != "good" {
		t.Fatalf("Watermill got %s, want only the readable message", m.UUID)
	}
	m.Ack()
	select {
	case err := <-reported:
		if !strings.Contains(err.Error(), "bad dead-lettered: malformed envelope") {
			t.Fatalf("reported %v, want the dead-lettering of bad with its cause", err)
		}
	case <-time.After(wait):
		t.Fatal("the dead-lettering was not reported to OnError")
	}
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if len(pa.settled) == 0 || pa.settled[0].Action != ports.DeadLetter || !errors.Is(pa.settled[0].Reason, ports.ErrPoison) || pa.settled[0].Attempts != 1 {
		t.Fatalf("settlements %+v, want a DEAD_LETTER with a poison reason and 1 attempt first", pa.settled)
	}
}

// plainAdapter hides mem's DeclareGroup (an adapter that cannot declare a
// group ahead of its consumer) and gives its subscriptions a Flush, as
// adapters that defer settlements do; it records the order of the calls.
type plainAdapter struct {
	ports.Adapter
	mu    sync.Mutex
	calls []string
}

func (p *plainAdapter) record(call string) {
	p.mu.Lock()
	p.calls = append(p.calls, call)
	p.mu.Unlock()
}

func (p *plainAdapter) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	p.record("subscribe")
	s, err := p.Adapter.Subscribe(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &flushSub{Subscription: s, p: p}, nil
}

type flushSub struct {
	ports.Subscription
	p *plainAdapter
}

func (s *flushSub) Flush(context.Context) error { s.p.record("flush"); return nil }

func (s *flushSub) Stop(ctx context.Context) error {
	s.p.record("stop")
	return s.Subscription.Stop(ctx)
}

// Without ports.GroupDeclarer, SubscribeInitialize starts and stops a
// subscription; a subscription's deferred settlements are flushed before
// it stops, after the last verdict.
func TestInitializeFallbackAndFlushBeforeStop(t *testing.T) {
	pa := &plainAdapter{Adapter: newMem(t)}
	sub := wmbridge.NewSubscriber(pa, wmbridge.SubscriberConfig{Group: "g"})
	if err := sub.SubscribeInitialize("t"); err != nil {
		t.Fatal(err)
	}
	msgs := subscribe(t, sub, "t")
	if err := wmbridge.NewPublisher(pa).Publish("t", message.NewMessage("f", nil)); err != nil {
		t.Fatal(err)
	}
	next(t, msgs, "message").Ack()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if got := strings.Join(pa.calls, " "); got != "subscribe stop subscribe flush stop" {
		t.Fatalf("calls %q, want %q", got, "subscribe stop subscribe flush stop")
	}
}
