package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/amqp"
	"github.com/sluicemq/sluice/adapters/amqp/rabbittest"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/operators"
	"github.com/sluicemq/sluice/ports"
)

// confirmLedger records which messages Send reported confirmed.
type confirmLedger struct {
	mu        sync.Mutex
	confirmed map[string]bool
	failed    int
	returned  int // sends refused as unroutable, retried
}

// sendStream sends n messages, mk(i) for i in [0, n), in calls of batch
// about every `every`, sending again every message a call did not confirm
// (named in ports.SendErrors) until all are confirmed. idOf names a
// message in the ledger.
func sendStream(ctx context.Context, a ports.Sender, n, batch int, every time.Duration, mk func(i int) ports.Message, idOf func(ports.Message) string, l *confirmLedger) error {
	pending := make([]ports.Message, 0, batch)
	next := 0
	tick := time.NewTicker(every)
	defer tick.Stop()
	for next < n || len(pending) > 0 {
		for len(pending) < batch && next < n {
			pending = append(pending, mk(next))
			next++
		}
		err := a.Send(ctx, pending...)
		se := ports.SendErrors(err)
		if err != nil && len(se) == 0 {
			return fmt.Errorf("send: %w (not a ports.SendErrors)", err)
		}
		failed := map[int]bool{}
		for _, e := range se {
			failed[e.Index] = true
			if errors.Is(e, ports.ErrNoSubscriber) {
				l.returned++
			}
		}
		keep := pending[:0]
		l.mu.Lock()
		for i, m := range pending {
			if failed[i] {
				keep = append(keep, m)
				l.failed++
				continue
			}
			l.confirmed[idOf(m)] = true
		}
		l.mu.Unlock()
		pending = keep
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// drain consumes spec's group with a fresh adapter until every id in want
// arrived or nothing new arrived for quiet, and returns the ids received.
func drain(t *testing.T, url string, spec ports.SubscriptionSpec, want map[string]bool, quiet time.Duration) map[string]int {
	t.Helper()
	a := newAdapter(t, amqp.Options{URL: url, Namespace: restartNS})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub, err := a.Subscribe(ctx, spec)
	if err != nil {
		t.Fatalf("subscribe the fresh consumer: %v", err)
	}
	defer sub.Stop(context.Background())
	got := map[string]int{}
	missing := len(want)
	for missing > 0 {
		rctx, rcancel := context.WithTimeout(ctx, quiet)
		ds, err := sub.Receive(rctx, 256)
		rcancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return got // nothing new for quiet
		}
		if err != nil {
			t.Fatalf("fresh consumer: %v (%d of %d confirmed ids still missing)", err, missing, len(want))
		}
		for _, d := range ds {
			got[d.ID]++
			if got[d.ID] == 1 && want[d.ID] {
				missing--
			}
		}
		if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	return got
}

var restartNS = namespace("restart")

// TestConfirmedSendsSurviveBrokerRestart sends in calls of 20 messages at
// a steady rate while the RabbitMQ application is stopped and started
// (rabbitmqctl stop_app, start_app), retrying what was not confirmed; a
// fresh consumer of the group must then receive every message whose send
// was confirmed.
func TestConfirmedSendsSurviveBrokerRestart(t *testing.T) {
	node := rabbittest.Own(t, rabbittest.Options{})
	topic := ports.Topic("restart.readings")
	spec := ports.SubscriptionSpec{Topic: topic, Group: "ingest"}
	pub := newAdapter(t, amqp.Options{URL: node.URL, Namespace: restartNS, DialTimeout: 2 * time.Second,
		ReconnectBackoff: 50 * time.Millisecond, ReconnectMaxBackoff: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := ports.DeclareGroup(ctx, pub, topic, spec.Group); err != nil {
		t.Fatal(err)
	}
	l := &confirmLedger{confirmed: map[string]bool{}}
	// A consumer of the group runs through the restart, acking batches.
	var seenMu sync.Mutex
	seen := map[string]int{}
	cons := newAdapter(t, amqp.Options{URL: node.URL, Namespace: restartNS, DialTimeout: 2 * time.Second,
		ReconnectBackoff: 50 * time.Millisecond, ReconnectMaxBackoff: time.Second})
	cspec := spec
	cspec.InFlight = 200
	p := flow.New(cons, cspec, flow.WithErrorHandler(func(error) {}))
	batches := operators.Batch(p.Source(), operators.BatchOptions{Size: 100, Window: 50 * time.Millisecond})
	flow.Sink(batches, func(_ context.Context, b operators.Batched[*ports.Delivery]) error {
		seenMu.Lock()
		for _, d := range b.Values {
			seen[d.ID]++
		}
		seenMu.Unlock()
		return nil
	})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 6000
	done := make(chan error, 1)
	mk := func(i int) ports.Message {
		return ports.Message{Topic: topic, Payload: []byte(`{"i":` + fmt.Sprint(i) + `}`),
			Headers: ports.NewHeaders(ports.HeaderID, fmt.Sprintf("r-%05d", i))}
	}
	idOf := func(m ports.Message) string { return m.Headers.Get(ports.HeaderID) }
	go func() { done <- sendStream(ctx, pub, n, 20, 20*time.Millisecond, mk, idOf, l) }()
	// Restart once a part of the stream was confirmed.
	for {
		l.mu.Lock()
		c := len(l.confirmed)
		l.mu.Unlock()
		if c >= 1000 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("producer ended before the restart: %v", err)
		case <-time.After(20 * time.Millisecond): // polling a counter, bounded by ctx
		case <-ctx.Done():
			t.Fatal("the stream did not start")
		}
	}
	if err := node.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Let the live consumer take what it can, then stop it and drain the
	// rest with a fresh consumer.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		seenMu.Lock()
		k := len(seen)
		seenMu.Unlock()
		if k >= len(l.confirmed) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling a counter, bounded
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	if err := p.Stop(sctx); err != nil {
		t.Logf("stop consumer: %v", err)
	}
	scancel()
	got := drain(t, node.URL, spec, l.confirmed, 5*time.Second)
	seenMu.Lock()
	live := len(seen)
	for id, k := range seen {
		got[id] += k
	}
	seenMu.Unlock()
	t.Logf("live consumer saw %d distinct", live)
	var lost []string
	for id := range l.confirmed {
		if got[id] == 0 {
			lost = append(lost, id)
		}
	}
	t.Logf("confirmed %d, failed sends retried %d (unroutable %d), received %d distinct", len(l.confirmed), l.failed, l.returned, len(got))
	if len(lost) > 0 {
		t.Fatalf("LOST %d confirmed message(s): %v", len(lost), lost)
	}
}
