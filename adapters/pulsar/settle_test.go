package pulsar_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/pulsar/internal/fakepulsar"
	"github.com/sluicemq/sluice/ports"
)

// These tests drive every settlement branch through the fake client and
// read back, from its record, which client calls the adapter made. They
// prove the mapping onto the client API, not behaviour against a real
// Pulsar broker (see tck_test.go for that).

func TestAckAcknowledgesOnBrokerOnlyWhenSettled(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	send(t, a, msg("orders", "m1"))

	d := receiveN(t, s, 1)[0]
	if got := ops(env.broker, fakepulsar.OpAck, ""); len(got) != 0 {
		t.Fatalf("acknowledged before Settle: %+v", got)
	}
	if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle(Ack): %v", err)
	}
	acks := ops(env.broker, fakepulsar.OpAck, physical("orders"))
	if len(acks) != 1 || acks[0].ID != "m1" || acks[0].Subscription != "billing" || acks[0].Err != nil {
		t.Fatalf("ack events = %+v, want one ack of m1 on billing", acks)
	}
	if u := env.broker.Unacked(physical("orders"), "billing"); len(u) != 0 {
		t.Fatalf("unacked after ack: %v", u)
	}
}

func TestRequeueHoldsItsDelayThenNacksWithNativeCount(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	send(t, a, msg("orders", "m1"))

	d := receiveN(t, s, 1)[0]
	// Each requeue gets its own delay: the portable layer holds it, then
	// the driver nacks with the consumer's one nack delay (the tick).
	for attempt, delay := range []time.Duration{60 * time.Millisecond, 20 * time.Millisecond, 0} {
		if d.ID != "m1" || d.RedeliveryCount != attempt {
			t.Fatalf("attempt %d: got %s with count %d, want m1 with count %d", attempt, d.ID, d.RedeliveryCount, attempt)
		}
		settled := time.Now()
		if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue, Reason: errors.New("transient"), Delay: delay, Attempts: attempt + 1}); err != nil {
			t.Fatalf("Settle(Requeue): %v", err)
		}
		d = receiveN(t, s, 1)[0]
		if el := time.Since(settled); el < delay {
			t.Fatalf("attempt %d: redelivered after %v, before the %v delay", attempt, el, delay)
		}
		nacks := ops(env.broker, fakepulsar.OpNack, "")
		if len(nacks) != attempt+1 {
			t.Fatalf("nack events = %d, want %d", len(nacks), attempt+1)
		}
		if want := 9 * time.Millisecond; nacks[attempt].Delay != want {
			t.Fatalf("attempt %d: the client's tracker got delay %v, want the requeue tick %v", attempt, nacks[attempt].Delay, want)
		}
	}
	if d.RedeliveryCount != 3 {
		t.Fatalf("after three requeues the count is %d, want 3", d.RedeliveryCount)
	}
	if acks := ops(env.broker, fakepulsar.OpAck, ""); len(acks) != 0 {
		t.Fatalf("requeue acknowledged something: %+v", acks)
	}
}

func TestDeadLetterPublishesConfirmedThenAcks(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	dlq := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders.dlq", Group: "ops"})
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	m := msg("orders", "m1")
	m.Key = "k1"
	m.Headers.Set(ports.HeaderRequestID, "req-1")
	send(t, a, m)

	d := receiveN(t, s, 1)[0]
	reason := ports.Poisonf("bad total")
	if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.DeadLetter, Reason: reason, Attempts: 3}); err != nil {
		t.Fatalf("Settle(DeadLetter): %v", err)
	}
	// Order of client calls: the dead-letter send, then the ack.
	var order []string
	for _, e := range env.broker.Events() {
		switch {
		case e.Op == fakepulsar.OpSend && e.Topic == physical("orders.dlq"):
			order = append(order, "dlq-send:"+e.ID)
		case e.Op == fakepulsar.OpAck && e.Topic == physical("orders"):
			order = append(order, "ack:"+e.ID)
		}
	}
	if len(order) != 2 || order[0] != "dlq-send:m1" || order[1] != "ack:m1" {
		t.Fatalf("client calls = %v, want [dlq-send:m1 ack:m1]", order)
	}
	got := receiveN(t, dlq, 1)[0]
	want := map[string]string{
		ports.HeaderID:               "m1",
		ports.HeaderRequestID:        "req-1",
		ports.HeaderDeadLetterReason: reason.Error(),
		ports.HeaderDeadLetterTopic:  "orders",
		ports.HeaderAttempts:         "3",
	}
	for k, v := range want {
		if got.Headers.Get(k) != v {
			t.Errorf("dead letter header %s = %q, want %q", k, got.Headers.Get(k), v)
		}
	}
	if got.Key != "k1" || string(got.Payload) != string(m.Payload) {
		t.Errorf("dead letter key/payload = %q/%s, want k1/%s", got.Key, got.Payload, m.Payload)
	}
}

func TestDeadLetterPublishFailureLeavesOriginalUnacked(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	spec := ports.SubscriptionSpec{Topic: "orders", Group: "billing"}
	s := subscribe(t, a, spec)
	send(t, a, msg("orders", "m1"))
	d := receiveN(t, s, 1)[0]

	refused := errors.New("dlq topic refused the write")
	env.broker.SetSendFault(func(topic string, _ *pulsar.ProducerMessage) error {
		if topic == physical("orders.dlq") {
			return refused
		}
		return nil
	})
	err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poisonf("bad"), Attempts: 1})
	if !errors.Is(err, ports.ErrUnconfirmed) || !errors.Is(err, refused) {
		t.Fatalf("Settle(DeadLetter) = %v, want an error wrapping ErrUnconfirmed and the cause", err)
	}
	if acks := ops(env.broker, fakepulsar.OpAck, ""); len(acks) != 0 {
		t.Fatalf("original acknowledged after a failed dead-letter publish: %+v", acks)
	}
	if u := env.broker.Unacked(physical("orders"), "billing"); len(u) != 1 || u[0] != "m1" {
		t.Fatalf("unacked = %v, want [m1]", u)
	}

	// The message is still there for the group: after a restart it comes back.
	env.broker.SetSendFault(nil)
	stop(t, s)
	again := receiveN(t, subscribe(t, env.adapter(), spec), 1)[0]
	if again.ID != "m1" {
		t.Fatalf("after restart got %s, want m1", again.ID)
	}
}

func TestAckFailureIsReturnedAndLeavesMessageUnacked(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	send(t, a, msg("orders", "m1"))
	d := receiveN(t, s, 1)[0]

	lost := errors.New("connection lost")
	env.broker.SetAckFault(func(string, string) error { return lost })
	if err := s.Settle(ctxT(t), []*ports.Delivery{d}, ports.Disposition{Action: ports.Ack}); !errors.Is(err, lost) {
		t.Fatalf("Settle(Ack) = %v, want the ack failure", err)
	}
	if u := env.broker.Unacked(physical("orders"), "billing"); len(u) != 1 {
		t.Fatalf("unacked = %v, want [m1]", u)
	}
}

func TestBatchIsSettledWithOneAckCommand(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "billing", Batch: ports.BatchSpec{Size: 5}})
	var msgs []ports.Message
	for i := range 5 {
		msgs = append(msgs, msg("orders", "m"+strconv.Itoa(i)))
	}
	send(t, a, msgs...)
	batch := receiveN(t, s, 5)
	if err := s.Settle(ctxT(t), batch, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("Settle(batch Ack): %v", err)
	}
	acks := ops(env.broker, fakepulsar.OpAck, "")
	if len(acks) != 5 {
		t.Fatalf("acks = %d, want 5", len(acks))
	}
	for _, e := range acks {
		if e.Batch != 5 {
			t.Fatalf("ack of %s carried %d ids, want all 5 in one AckIDList", e.ID, e.Batch)
		}
	}
}

func TestBatchDeadLetterFailureSettlesNoneOfTheBatch(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	send(t, a, msg("orders", "m0"), msg("orders", "m1"), msg("orders", "m2"))
	batch := receiveN(t, s, 3)
	// Only the second copy fails: the batch still has one outcome.
	env.broker.SetSendFault(func(topic string, pm *pulsar.ProducerMessage) error {
		if topic == physical("orders.dlq") && pm.Properties[ports.HeaderID] == "m1" {
			return errors.New("refused")
		}
		return nil
	})
	err := s.Settle(ctxT(t), batch, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("exhausted"), Attempts: 5})
	if err == nil {
		t.Fatal("Settle(DeadLetter) of a batch with a failed copy returned nil")
	}
	if acks := ops(env.broker, fakepulsar.OpAck, ""); len(acks) != 0 {
		t.Fatalf("acknowledged part of a batch whose dead-letter publish failed: %+v", acks)
	}
}

func TestStopAcknowledgesNothingAndGroupGetsMessagesAgain(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	spec := ports.SubscriptionSpec{Topic: "orders", Group: "billing"}
	s := subscribe(t, a, spec)
	send(t, a, msg("orders", "m0"), msg("orders", "m1"), msg("orders", "m2"))
	held := receiveN(t, s, 3)

	stop(t, s)
	if acks := ops(env.broker, fakepulsar.OpAck, ""); len(acks) != 0 {
		t.Fatalf("Stop acknowledged: %+v", acks)
	}
	if nacks := ops(env.broker, fakepulsar.OpNack, ""); len(nacks) != 0 {
		t.Fatalf("Stop negatively acknowledged: %+v", nacks)
	}
	// Settling after Stop is refused and settles nothing.
	if err := s.Settle(ctxT(t), held, ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Settle after Stop = %v, want ErrClosed", err)
	}
	if _, err := s.Receive(ctxT(t), 1); !errors.Is(err, ports.ErrClosed) {
		t.Fatalf("Receive after Stop = %v, want ErrClosed", err)
	}
	if _, open := <-s.Errors(); open {
		t.Fatal("Errors not closed after Stop")
	}
	if err := s.Stop(ctxT(t)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	again := receiveN(t, subscribe(t, env.adapter(), spec), 3)
	seen := map[string]bool{}
	for _, d := range again {
		seen[d.ID] = true
	}
	if len(seen) != 3 {
		t.Fatalf("after restart got %v, want m0 m1 m2", seen)
	}
}

func TestCancelledSettleSettlesNothing(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "billing"})
	send(t, a, msg("orders", "m1"))
	d := receiveN(t, s, 1)[0]

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, action := range []ports.Action{ports.Ack, ports.Requeue, ports.DeadLetter} {
		err := s.Settle(ctx, []*ports.Delivery{d}, ports.Disposition{Action: action, Reason: errors.New("x")})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Settle(%v) with a cancelled context = %v, want context.Canceled", action, err)
		}
	}
	for _, op := range []fakepulsar.Op{fakepulsar.OpAck, fakepulsar.OpNack} {
		if got := ops(env.broker, op, ""); len(got) != 0 {
			t.Fatalf("cancelled Settle made %s calls: %+v", op, got)
		}
	}
	if got := ops(env.broker, fakepulsar.OpSend, physical("orders.dlq")); len(got) != 0 {
		t.Fatalf("cancelled Settle published a dead letter: %+v", got)
	}
}

func TestSettleRejectsForeignDeliveries(t *testing.T) {
	env := newFakeEnv(t)
	a := env.adapter()
	s1 := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "g1"})
	s2 := subscribe(t, a, ports.SubscriptionSpec{Topic: "orders", Group: "g2"})
	send(t, a, msg("orders", "m1"))
	d1 := receiveN(t, s1, 1)[0]
	receiveN(t, s2, 1)

	for _, ds := range [][]*ports.Delivery{{d1}, {{ID: "made-up"}}} {
		if err := s2.Settle(ctxT(t), ds, ports.Disposition{Action: ports.Ack}); !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("Settle of a foreign delivery = %v, want ErrInvalid", err)
		}
	}
	if err := s1.Settle(ctxT(t), []*ports.Delivery{d1}, ports.Disposition{Action: ports.Action(42)}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Settle with an unknown action = %v, want ErrInvalid", err)
	}
	if acks := ops(env.broker, fakepulsar.OpAck, ""); len(acks) != 0 {
		t.Fatalf("invalid settlements acknowledged: %+v", acks)
	}
}
