package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	"github.com/sluicemq/sluice/ports"
)

// chunkBrokerMax is the max_message_size of the chunk tests' broker: small,
// so that a 160 KB payload needs about a dozen chunks.
const chunkBrokerMax = 16 << 10

// chunkEnv starts a pulsartest broker with a small max_message_size and
// an adapter over it with chunking on.
func chunkEnv(t *testing.T) (*pulsartest.Broker, *pulsar.Adapter) {
	t.Helper()
	b, err := pulsartest.Start(pulsartest.WithMaxMessageSize(chunkBrokerMax), pulsartest.WithLogf(t.Logf))
	if err != nil {
		t.Fatalf("starting pulsartest: %v", err)
	}
	t.Cleanup(b.Close)
	a, err := pulsar.New(context.Background(), pulsar.Options{URL: b.URL(), Chunking: true, RequeueTick: 30 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b, a
}

// bigPayload is n bytes that differ along their length, so that a chunk
// lost, repeated or out of order changes it.
func bigPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i/251)
	}
	return p
}

func TestChunkingCapabilityAndBound(t *testing.T) {
	_, a := chunkEnv(t)
	if got := a.Capabilities().MaxMessageBytes; got != pulsar.MaxChunkedMessageBytes {
		t.Fatalf("MaxMessageBytes with chunking = %d, want MaxChunkedMessageBytes %d", got, pulsar.MaxChunkedMessageBytes)
	}
	plain, err := pulsar.New(context.Background(), pulsar.Options{URL: "pulsar://127.0.0.1:1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(context.Background())
	if got := plain.Capabilities().MaxMessageBytes; got != pulsar.MaxMessageBytes {
		t.Fatalf("MaxMessageBytes without chunking = %d, want MaxMessageBytes %d", got, pulsar.MaxMessageBytes)
	}
	bound, err := pulsar.New(context.Background(), pulsar.Options{URL: "pulsar://127.0.0.1:1", Chunking: true, MaxMessageBytes: 1 << 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer bound.Close(context.Background())
	if got := bound.Capabilities().MaxMessageBytes; got != 1<<20 {
		t.Fatalf("MaxMessageBytes with chunking and MaxMessageBytes 1 MiB = %d, want %d", got, 1<<20)
	}
	// Above the bound: refused before the broker, as without chunking.
	err = bound.Send(ctxT(t), ports.Message{Topic: "big", Payload: make([]byte, 1<<20+1)})
	var se *ports.SizeError
	if !errors.As(err, &se) || !errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Send above the chunked bound = %v, want a *ports.SizeError (ErrInvalid)", err)
	}
}

// TestChunkedMessageRequeuedTwiceThenAcked: a 160 KB payload on a broker
// whose max_message_size is 16 KiB goes as several chunks, arrives whole,
// is requeued twice (redelivered whole each time, with the count) and
// acked whole: nothing is left on the subscription.
func TestChunkedMessageRequeuedTwiceThenAcked(t *testing.T) {
	b, a := chunkEnv(t)
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "big", Group: "g"})
	body := bigPayload(160_000)
	m := ports.Message{Topic: "big", Payload: body, Headers: ports.NewHeaders(ports.HeaderID, "big-1")}
	send(t, a, m)

	st, ok := b.Topic("big")
	if !ok {
		t.Fatal("topic big not on the broker")
	}
	if min := 160_000/chunkBrokerMax + 1; st.Entries < min {
		t.Fatalf("the payload was stored as %d entries, want at least %d chunks", st.Entries, min)
	}
	t.Logf("160,000-byte payload stored as %d chunks (broker max_message_size %d)", st.Entries, chunkBrokerMax)

	d := receiveN(t, s, 1)[0]
	for attempt := range 3 {
		if d.ID != "big-1" || !bytes.Equal(d.Payload, body) {
			t.Fatalf("attempt %d: got %s with %d bytes, want big-1 whole (%d bytes)", attempt, d.ID, len(d.Payload), len(body))
		}
		if d.RedeliveryCount != attempt {
			t.Errorf("attempt %d: RedeliveryCount %d, want %d", attempt, d.RedeliveryCount, attempt)
		}
		if attempt == 2 {
			break
		}
		delay := time.Duration(attempt) * 200 * time.Millisecond // 0, then longer than the requeue tick
		start := time.Now()
		if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue, Delay: delay}); err != nil {
			t.Fatalf("attempt %d: Settle(Requeue): %v", attempt, err)
		}
		d = receiveN(t, s, 1)[0]
		if took := time.Since(start); took < delay {
			t.Fatalf("attempt %d: redelivered after %v, before the requeue delay %v", attempt, took, delay)
		}
	}
	if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle(Ack): %v", err)
	}
	if sub, ok := b.Subscription("big", "g"); !ok || sub.Backlog != 0 {
		t.Fatalf("after the ack the subscription holds %+v, want every chunk acknowledged (backlog 0)", sub)
	}
	receiveNone(t, s, 300*time.Millisecond)
}

// TestChunkedMessageDeadLetteredWhole: a chunked message dead-lettered is
// published whole (chunked again) to the dead-letter topic and then acked
// by every chunk.
func TestChunkedMessageDeadLetteredWhole(t *testing.T) {
	b, a := chunkEnv(t)
	dlq := subscribe(t, a, ports.SubscriptionSpec{Topic: "big.dlq", Group: "ops"})
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "big", Group: "g"})
	body := bigPayload(160_000)
	send(t, a, ports.Message{Topic: "big", Payload: body, Key: "k", Headers: ports.NewHeaders(ports.HeaderID, "big-2")})

	d := receiveN(t, s, 1)[0]
	reason := ports.Poisonf("too big to handle")
	if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.DeadLetter, Reason: reason, Attempts: 1}); err != nil {
		t.Fatalf("Settle(DeadLetter): %v", err)
	}
	if st, ok := b.Topic("big.dlq"); !ok || st.Entries < 2 {
		t.Fatalf("dead-letter topic holds %+v, want the payload in several chunks", st)
	}
	got := receiveN(t, dlq, 1)[0]
	if got.ID != "big-2" || got.Key != "k" || !bytes.Equal(got.Payload, body) {
		t.Fatalf("dead letter %s key %q with %d bytes, want big-2 key k whole (%d bytes)", got.ID, got.Key, len(got.Payload), len(body))
	}
	if got.Headers.Get(ports.HeaderDeadLetterReason) != reason.Error() || got.Headers.Get(ports.HeaderDeadLetterTopic) != "big" {
		t.Errorf("dead letter headers %v, want the reason and source topic", got.Headers)
	}
	if sub, ok := b.Subscription("big", "g"); !ok || sub.Backlog != 0 {
		t.Fatalf("after dead-lettering the source subscription holds %+v, want every chunk acknowledged", sub)
	}
	receiveNone(t, s, 300*time.Millisecond)
}

// TestOpenWithChunking: ?chunking=true turns chunking on (the bound in the
// capabilities, a payload above the broker's max_message_size goes
// through); a value other than a boolean is refused.
func TestOpenWithChunking(t *testing.T) {
	b, err := pulsartest.Start(pulsartest.WithMaxMessageSize(chunkBrokerMax))
	if err != nil {
		t.Fatalf("starting pulsartest: %v", err)
	}
	t.Cleanup(b.Close)
	a, err := adapters.Open(ctxT(t), b.URL()+"?chunking=true", adapters.NotExclusive())
	if err != nil {
		t.Fatalf("Open(?chunking=true): %v", err)
	}
	defer opentest.Close(t, a)
	if got := a.Capabilities().MaxMessageBytes; got != pulsar.MaxChunkedMessageBytes {
		t.Fatalf("MaxMessageBytes = %d, want %d", got, pulsar.MaxChunkedMessageBytes)
	}
	s, err := a.Subscribe(ctxT(t), ports.SubscriptionSpec{Topic: "big", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, s)
	body := bigPayload(64_000)
	if err := a.Send(ctxT(t), ports.Message{Topic: "big", Payload: body}); err != nil {
		t.Fatalf("Send of %d bytes over a %d-byte broker limit: %v", len(body), chunkBrokerMax, err)
	}
	if d := receiveN(t, s, 1)[0]; !bytes.Equal(d.Payload, body) {
		t.Fatalf("got %d bytes, want the %d-byte payload whole", len(d.Payload), len(body))
	} else if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Topic("big"); st.ChunkedMessages != 1 {
		t.Fatalf("topic stats %+v, want one chunked message", st)
	}

	_, err = adapters.Open(ctxT(t), "pulsar://h:6650?chunking=maybe", adapters.NotExclusive())
	if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "chunking") {
		t.Fatalf("Open(?chunking=maybe) = %v, want ErrInvalid naming chunking", err)
	}
}

// TestChunkedRequeuePendingAtStop: a chunked message requeued with a long
// delay, whose subscription stops before the delay is over, is not lost:
// the pending nack is dropped with the consumer and the broker hands the
// whole message to the group's next consumer.
func TestChunkedRequeuePendingAtStop(t *testing.T) {
	_, a := chunkEnv(t)
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "big", Group: "g"})
	body := bigPayload(160_000)
	send(t, a, ports.Message{Topic: "big", Payload: body, Headers: ports.NewHeaders(ports.HeaderID, "big-3")})
	d := receiveN(t, s, 1)[0]
	if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue, Delay: time.Hour}); err != nil {
		t.Fatalf("Settle(Requeue, 1h): %v", err)
	}
	stop(t, s)
	next := subscribe(t, a, ports.SubscriptionSpec{Topic: "big", Group: "g"})
	got := receiveN(t, next, 1)[0]
	if got.ID != "big-3" || !bytes.Equal(got.Payload, body) {
		t.Fatalf("after Stop the group got %s with %d bytes, want big-3 whole", got.ID, len(got.Payload))
	}
	if err := next.Settle(ctxT(t), []*ports.Delivery{got}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}
