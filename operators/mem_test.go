package operators_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

// These tests run the operators over the in-process broker in the shape of
// the TCK's batch, bounded-retry and delay cases (tck/), with the
// operators in place of the kit's own helpers.

func memBroker(t *testing.T) *mem.Broker {
	t.Helper()
	b, err := mem.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func memAdapter(t *testing.T, b *mem.Broker) *mem.Adapter {
	t.Helper()
	a, err := mem.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}

func startPipeline(t *testing.T, p *flow.Pipeline) {
	t.Helper()
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAt(p, 0) })
}

// stopAt stops p, draining for at most d.
func stopAt(p *flow.Pipeline, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = p.Stop(ctx)
}

func sendN(t *testing.T, a *mem.Adapter, topic ports.Topic, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = ports.NewID()
		m := ports.Message{Topic: topic, Key: "k" + strconv.Itoa(i%3), Payload: []byte(strconv.Itoa(i)), Headers: ports.NewHeaders(ports.HeaderID, ids[i])}
		if err := a.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling a counter, bounded
	}
}

// TCK case 10 with operators.Batch: the handler gets batches of 1..size;
// success acks the whole batch; nothing comes back after a restart.
func TestMemBatchAcksWholeBatchNoRedeliveryAfterRestart(t *testing.T) {
	const n, size = 23, 5
	b := memBroker(t)
	a := memAdapter(t, b)
	sp := ports.SubscriptionSpec{Topic: "orders", Group: "billing", Batch: ports.BatchSpec{Size: size, Window: 100 * time.Millisecond}}
	var mu sync.Mutex
	seen := map[string]int{}
	var bad atomic.Int32
	p := flow.New(a, sp, flow.WithDrainTimeout(0))
	flow.Sink(operators.Batch(p.Source(), operators.BatchOptions{}), func(_ context.Context, bt operators.Batched[*ports.Delivery]) error {
		if bt.Len() < 1 || bt.Len() > size {
			bad.Add(1)
		}
		mu.Lock()
		for _, d := range bt.Values {
			seen[d.ID]++
		}
		mu.Unlock()
		return nil
	})
	startPipeline(t, p)
	ids := sendN(t, a, "orders", n)
	waitFor(t, "23 acks", func() bool { return p.Stats().Acked == n })
	stopAt(p, 0)
	if bad.Load() != 0 {
		t.Fatalf("%d batches outside 1..%d", bad.Load(), size)
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("message %s seen %d times, want 1", id, seen[id])
		}
	}
	again := memAdapter(t, b)
	sub, err := again.Subscribe(context.Background(), ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if ds, err := sub.Receive(ctx, 10); len(ds) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after restart received %d deliveries (%v); an acked batch must not come back", len(ds), err)
	}
}

// TCK case 11 with operators.Retry: local attempts inside each delivery,
// deliveries ≤ MaxAttempts, then a dead letter carrying the attempt count
// and the last error — never a silent drop.
func TestMemBoundedRetryThenDeadLetterWithAttempts(t *testing.T) {
	const bound, local = 3, 2
	b := memBroker(t)
	a := memAdapter(t, b)
	sp := ports.SubscriptionSpec{Topic: "jobs", Group: "workers", Retry: ports.RetryPolicy{MaxAttempts: bound, NoBackoff: true}}
	var calls atomic.Int32
	deliveries := map[int]bool{}
	var mu sync.Mutex
	p := flow.New(a, sp)
	flow.Sink(p.Source(), operators.Retry(func(ctx context.Context, _ *ports.Delivery) error {
		calls.Add(1)
		mu.Lock()
		deliveries[operators.Attempt(ctx)] = true
		mu.Unlock()
		return errors.New("downstream unavailable")
	}, operators.RetryOptions{Attempts: local, Backoff: time.Millisecond}))
	dlq, err := a.Subscribe(context.Background(), ports.SubscriptionSpec{Topic: ports.DeadLetterTopic("jobs"), Group: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Stop(context.Background())
	startPipeline(t, p)
	id := sendN(t, a, "jobs", 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dead, err := dlq.Receive(ctx, 1)
	if err != nil {
		t.Fatalf("no dead letter within 10s: %v (stats %+v)", err, p.Stats())
	}
	h := dead[0].Headers
	if dead[0].ID != id || h.Get(ports.HeaderAttempts) != strconv.Itoa(bound) {
		t.Fatalf("dead letter %s attempts %q, want %s after %d", dead[0].ID, h.Get(ports.HeaderAttempts), id, bound)
	}
	if r := h.Get(ports.HeaderDeadLetterReason); !strings.Contains(r, "downstream unavailable") || !strings.Contains(r, "2 local attempts") {
		t.Fatalf("dead-letter reason %q, want the last error and the local attempts", r)
	}
	if calls.Load() != bound*local || len(deliveries) != bound {
		t.Fatalf("%d calls over %d deliveries, want %d over %d", calls.Load(), len(deliveries), bound*local, bound)
	}
}

// The Delay stage over the broker: not handled before the deadline,
// handled and acked after it.
func TestMemDelayNotHandledBeforeDeadline(t *testing.T) {
	const d = 60 * time.Millisecond
	b := memBroker(t)
	a := memAdapter(t, b)
	handled := make(chan time.Duration, 4)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "later", Group: "g"})
	flow.Sink(operators.Delay(p.Source(), d), func(_ context.Context, m *ports.Delivery) error {
		handled <- time.Since(m.ReceivedAt)
		return nil
	})
	startPipeline(t, p)
	sendN(t, a, "later", 3)
	for range 3 {
		if w := recv(t, handled, "a delayed delivery"); w < d {
			t.Fatalf("handled %v after receipt, before the %v delay", w, d)
		}
	}
	waitFor(t, "3 acks", func() bool { return p.Stats().Acked == 3 })
}
