package pulsartest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
)

func TestFailNextSendsIsRetriedByTheClient(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	before := b.Counters()

	b.FailNextSends(1)
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("x")})

	got := b.Counters()
	if got.FailedSends-before.FailedSends != 1 || got.Sends-before.Sends != 2 {
		t.Fatalf("counters %+v -> %+v: want one refused SEND and one resend", before, got)
	}
	if got.Connections <= before.Connections {
		t.Fatalf("the client did not reconnect after SEND_ERROR (connections %d -> %d)", before.Connections, got.Connections)
	}
	if st, _ := b.Topic(topic); st.Entries != 1 {
		t.Fatalf("topic holds %d entries, want the message once", st.Entries)
	}
}

func TestControlSendSeesEverySend(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, Name: "ctl", DisableBatching: true})

	infos := make(chan pulsartest.SendInfo, 10)
	b.ControlSend(func(info pulsartest.SendInfo) pulsartest.SendFault {
		infos <- info
		return pulsartest.SendFault{Fail: len(infos) == 1} // refuse only the first
	})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("x")})
	b.ControlSend(nil)
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("y")})

	if len(infos) != 2 {
		t.Fatalf("control function saw %d SENDs, want the refused one and its resend", len(infos))
	}
	first, second := <-infos, <-infos
	if first.Topic != topic || first.Producer != "ctl" || first.NumMessages != 1 || first != second {
		t.Fatalf("SendInfo %+v then %+v: want the same SEND twice on %s by ctl", first, second, topic)
	}
	if st, _ := b.Topic(topic); st.Entries != 2 {
		t.Fatalf("topic holds %d entries, want 2", st.Entries)
	}
}

func TestDelayedReceiptAfterMessageIsStored(t *testing.T) {
	b := startBroker(t)
	prodClient, consClient := newClient(t, b), newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, consClient, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub"})
	p := newProducer(t, prodClient, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})

	const delay = 1500 * time.Millisecond
	b.DelayNextReceipts(1, delay)
	start := time.Now()
	sent := make(chan time.Time, 1)
	go func() {
		_, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("slow")})
		if err != nil {
			t.Errorf("Send: %v", err)
		}
		sent <- time.Now()
	}()
	m := receive(t, cons)
	received := time.Now()
	confirmed := <-sent
	if string(m.Payload()) != "slow" {
		t.Fatalf("got %q", m.Payload())
	}
	if confirmed.Sub(start) < delay {
		t.Fatalf("Send confirmed after %v, before the %v receipt delay", confirmed.Sub(start), delay)
	}
	if !received.Before(confirmed) {
		t.Fatalf("message reached the consumer (%v) only after the delayed receipt (%v)",
			received.Sub(start), confirmed.Sub(start))
	}
	if n := b.Counters().DelayedReceipts; n != 1 {
		t.Fatalf("DelayedReceipts = %d, want 1", n)
	}
}

func TestWithheldReceiptLeavesSendUnconfirmed(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})

	b.WithholdNextReceipts(1)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("lost-receipt")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send with a withheld receipt returned %v, want the context deadline", err)
	}
	if st, _ := b.Topic(topic); st.Entries != 1 {
		t.Fatalf("topic holds %d entries, want the stored message", st.Entries)
	}
	if n := b.Counters().WithheldReceipts; n != 1 {
		t.Fatalf("WithheldReceipts = %d, want 1", n)
	}
}

func TestDropConnectionsRedeliversAndClientsReconnect(t *testing.T) {
	b := startBroker(t)
	c := newClient(t, b)
	topic := topicName(t)
	cons := subscribe(t, c, pulsar.ConsumerOptions{
		Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared,
	})
	p := newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("before")})
	// pulsar-client-go v0.19.0 races with itself (found by -race) when a
	// producer reconnects while its event loop sends: the producer that
	// lives through the drop is therefore closed first, and a new one on
	// the same (reconnected) client sends afterwards.
	p.Close()
	if m := receive(t, cons); string(m.Payload()) != "before" {
		t.Fatalf("got %q", m.Payload())
	}

	if n := b.DropConnections(); n < 1 {
		t.Fatalf("DropConnections closed %d connections, want at least 1", n)
	}
	// The unacknowledged message comes back on the reconnected consumer;
	// Pulsar does not count a disconnect as a redelivery.
	m := receive(t, cons)
	if string(m.Payload()) != "before" || m.RedeliveryCount() != 0 {
		t.Fatalf("after the drop got %q with RedeliveryCount %d, want before with 0", m.Payload(), m.RedeliveryCount())
	}
	ack(t, cons, m)
	p = newProducer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	send(t, p, &pulsar.ProducerMessage{Payload: []byte("after")})
	if m := receive(t, cons); string(m.Payload()) != "after" {
		t.Fatalf("got %q, want after", m.Payload())
	}
}
