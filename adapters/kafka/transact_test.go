package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
)

// A transaction that fails at its commit (kfake refuses the EndTxn once):
// Settle(ACK) records the acknowledgements, Flush returns the failure,
// nothing of it is visible read committed, the records are delivered
// again, and their second transaction commits. Read committed, the output
// holds each result once.
func TestFailedTransactionRedelivers(t *testing.T) {
	if realKafka() {
		t.Skip("needs kfake's fault injection")
	}
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, sub, reader := transactional(ctx, t, b, "txnfail")
	send(t, a, "in", nil, "a", "b", "c")
	transform := func() error {
		ds := receiveN(t, sub, 3, 15*time.Second)
		for _, d := range ds {
			if err := sub.Stage(ctx, d, []ports.Message{{Topic: "out", Payload: append([]byte("out-"), d.Payload...)}}); err != nil {
				return err
			}
		}
		if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			return err
		}
		return sub.(ports.Flusher).Flush(ctx)
	}
	fault := b.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.InvalidTxnState, Count: 1})
	err := transform()
	if err == nil || !errors.Is(err, driver.ErrRecordsLost) {
		t.Fatalf("Settle(ACK) and Flush with a failed commit = %v, want an error wrapping driver.ErrRecordsLost", err)
	}
	fault.Remove()
	if err := transform(); err != nil {
		t.Fatalf("the redelivered records' transaction: %v", err)
	}
	got := map[string]int{}
	for _, d := range receiveN(t, reader, 3, 15*time.Second) {
		got[string(d.Payload)]++
	}
	receiveNone(t, reader, time.Second)
	for _, p := range []string{"out-a", "out-b", "out-c"} {
		if got[p] != 1 {
			t.Errorf("read committed, %q is in the output %d times, want once (all: %v)", p, got[p], got)
		}
	}
}

// A requeued and a dead-lettered delivery's staged output is in no
// transaction: read committed, only the acknowledged delivery's is.
func TestRequeueAndDeadLetterDiscardStaged(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, sub, reader := transactional(ctx, t, newBroker(t), "txndiscard")
	send(t, a, "in", nil, "acked", "requeued", "dead")
	for _, d := range receiveN(t, sub, 3, 15*time.Second) {
		if err := sub.Stage(ctx, d, []ports.Message{{Topic: "out", Payload: append([]byte("out-"), d.Payload...)}}); err != nil {
			t.Fatal(err)
		}
		disp := ports.Disposition{Action: ports.Ack}
		switch string(d.Payload) {
		case "requeued":
			disp = ports.Disposition{Action: ports.Requeue}
		case "dead":
			disp = ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("test")}
		}
		if err := sub.Settle(ctx, []*ports.Delivery{d}, disp); err != nil {
			t.Fatalf("Settle(%v) of %q: %v", disp.Action, d.Payload, err)
		}
	}
	if err := sub.(ports.Flusher).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if ds := receiveN(t, reader, 1, 15*time.Second); string(ds[0].Payload) != "out-acked" {
		t.Fatalf("read committed, the output holds %q, want out-acked", ds[0].Payload)
	}
	receiveNone(t, reader, time.Second)
}

// transactional returns an adapter of namespace ns on b, a transactional
// subscription of group g to "in" and a reader of "out".
func transactional(ctx context.Context, t *testing.T, b *broker, ns string) (*kafka.Adapter, ports.TransactionalSubscription, ports.Subscription) {
	cfg := b.config(ns, 1)
	cfg.TransactionTimeout = 2 * time.Second
	a := b.adapter(t, cfg)
	reader := subscribe(t, a, ports.SubscriptionSpec{Topic: "out", Group: "reader", Start: ports.StartEarliest})
	sub, err := a.SubscribeTransactional(ctx, ports.SubscriptionSpec{Topic: "in", Group: "g", InFlight: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })
	return a, sub, reader
}

// A record acknowledged ahead of an earlier one of its partition waits:
// its output is not committed before its offset can be, so a crash
// between the two transactions cannot make it visible twice.
func TestOutputWaitsForTheDonePrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, sub, reader := transactional(ctx, t, newBroker(t), "txnprefix")
	send(t, a, "in", nil, "0", "1", "2")
	ds := receiveN(t, sub, 3, 15*time.Second)
	for _, d := range ds {
		if err := sub.Stage(ctx, d, []ports.Message{{Topic: "out", Payload: append([]byte("out-"), d.Payload...)}}); err != nil {
			t.Fatal(err)
		}
	}
	flushAck := func(ds ...*ports.Delivery) {
		t.Helper()
		if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
			t.Fatal(err)
		}
		if err := sub.(ports.Flusher).Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	output := func(want ...string) {
		t.Helper()
		for _, d := range receiveN(t, reader, len(want), 15*time.Second) {
			if string(d.Payload) != want[0] {
				t.Fatalf("read committed, the output holds %q, want %q", d.Payload, want[0])
			}
			want = want[1:]
		}
		receiveNone(t, reader, time.Second)
	}
	flushAck(ds[0], ds[2]) // the position moves past 0 only
	output("out-0")
	flushAck(ds[1])
	output("out-1", "out-2")
}

// Without the idempotent producer a transactional subscription is refused
// with ports.ErrExactlyOnce (the portable layer refuses it: the adapter
// does not declare TransactionalSend then).
func TestTransactionsNeedIdempotence(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("txnnoidem", 1)
	cfg.DisableIdempotence = true
	a := b.adapter(t, cfg)
	if a.Capabilities().TransactionalSend {
		t.Fatal("TransactionalSend declared without the idempotent producer")
	}
	_, err := a.SubscribeTransactional(t.Context(), ports.SubscriptionSpec{Topic: "in", Group: "g"})
	if !errors.Is(err, ports.ErrExactlyOnce) {
		t.Fatalf("SubscribeTransactional = %v, want ErrExactlyOnce", err)
	}
}
