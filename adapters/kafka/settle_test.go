package kafka_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// TestPoisonKeyDoesNotBlockOtherKey: a message of key A that is failing
// (unsettled, then dead-lettered) holds back only the later messages of
// A; key B and keyless messages flow.
func TestPoisonKeyDoesNotBlockOtherKey(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("pk", 1))
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	dlq := subscribe(t, a, ports.SubscriptionSpec{Topic: "t.dlq", Group: "dlq"})

	send(t, a, "t", []string{"A", "B", "A", "B", ""}, "a1", "b1", "a2", "b2", "free")
	first := receiveN(t, s, 3, 10*time.Second)
	if p := payloads(first); !slices.Equal(p, []string{"a1", "b1", "free"}) {
		t.Fatalf("first hand-out = %q, want a1 b1 free (one in flight per key)", p)
	}
	receiveNone(t, s, 300*time.Millisecond)

	// a1 is poison and still being handled; B goes on.
	settle(t, s, ack, first[1])
	b2 := receiveN(t, s, 1, 5*time.Second)
	if string(b2[0].Payload) != "b2" {
		t.Fatalf("after acking b1 got %q, want b2 while a1 is unsettled", b2[0].Payload)
	}
	settle(t, s, ack, b2[0], first[2])
	receiveNone(t, s, 200*time.Millisecond)

	settle(t, s, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("bad schema"), Attempts: 1}, first[0])
	a2 := receiveN(t, s, 1, 5*time.Second)
	if string(a2[0].Payload) != "a2" {
		t.Fatalf("after dead-lettering a1 got %q, want a2", a2[0].Payload)
	}
	settle(t, s, ack, a2[0])

	dl := receiveN(t, dlq, 1, 10*time.Second)[0]
	if string(dl.Payload) != "a1" || dl.Key != "A" {
		t.Fatalf("dead letter = %q key %q", dl.Payload, dl.Key)
	}
	if dl.Headers.Get(ports.HeaderDeadLetterReason) != "bad schema" || dl.Headers.Get(ports.HeaderDeadLetterTopic) != "t" || dl.Headers.Get(ports.HeaderAttempts) != "1" {
		t.Fatalf("dead-letter headers = %v", dl.Headers)
	}
	if dl.ID != first[0].ID {
		t.Fatalf("dead letter id %q, want the original's %q", dl.ID, first[0].ID)
	}
	if c, want := b.committed(t, "pk.g", "pk.t", 0), offsetOf(t, first[0])+5; c != want {
		t.Fatalf("committed %d, want %d (all five settled)", c, want)
	}
}

// TestRequeueRepublishes: REQUEUE republishes to the same topic with the
// count incremented and the same id, no earlier than the delay, and the
// original offset is committed once the copy is confirmed.
func TestRequeueRepublishes(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("rq", 1))
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	send(t, a, "t", []string{"k"}, "m")
	d := receiveN(t, s, 1, 10*time.Second)[0]

	const delay = 300 * time.Millisecond
	at := time.Now()
	settle(t, s, ports.Disposition{Action: ports.Requeue, Reason: errors.New("db down"), Delay: delay}, d)
	r := receiveN(t, s, 1, 10*time.Second)[0]
	// The delayed copy is published when due, then the original is acked.
	flush(t, s)
	if c := b.committed(t, "rq.g", "rq.t", 0); c != offsetOf(t, d)+1 {
		t.Fatalf("committed %d after requeue, want %d", c, offsetOf(t, d)+1)
	}
	if since := time.Since(at); since < delay {
		t.Fatalf("redelivered after %v, before the %v delay", since, delay)
	}
	if r.ID != d.ID || r.RedeliveryCount != 1 || string(r.Payload) != "m" || r.Key != "k" {
		t.Fatalf("redelivery id %q count %d payload %q key %q", r.ID, r.RedeliveryCount, r.Payload, r.Key)
	}
	if offsetOf(t, r) <= offsetOf(t, d) {
		t.Fatalf("redelivery offset %d not after the original %d", offsetOf(t, r), offsetOf(t, d))
	}
	settle(t, s, ports.Disposition{Action: ports.Requeue, Reason: errors.New("again")}, r)
	r2 := receiveN(t, s, 1, 10*time.Second)[0]
	if r2.RedeliveryCount != 2 {
		t.Fatalf("second redelivery count %d, want 2", r2.RedeliveryCount)
	}
	settle(t, s, ack, r2)
}

// TestDeadLetterFailureLeavesOriginal: a refused dead-letter publish
// returns an error and commits nothing: the original stays unsettled; once
// the dead-letter topic accepts again it is dead-lettered and committed.
func TestDeadLetterFailureLeavesOriginal(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("dlf", 1)
	a := b.adapter(t, cfg)
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	dlq := subscribe(t, a, ports.SubscriptionSpec{Topic: "t.dlq", Group: "dlq"})
	send(t, a, "t", nil, "poison")
	d := receiveN(t, s, 1, 10*time.Second)[0]
	start := offsetOf(t, d)

	restore := b.failProduce(t, "dlf.t.dlq")
	dead := ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("poison"), Attempts: 1}
	err := s.Settle(t.Context(), []*ports.Delivery{d}, dead)
	if !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("settle with the dead-letter topic refusing: %v, want ErrUnconfirmed", err)
	}
	flush(t, s)
	if c := b.committed(t, "dlf.g", "dlf.t", 0); c != start {
		t.Fatalf("committed %d after a failed dead letter, want %d (original unsettled)", c, start)
	}
	restore()
	settle(t, s, dead, d)
	if c := b.committed(t, "dlf.g", "dlf.t", 0); c != start+1 {
		t.Fatalf("committed %d after the dead letter, want %d", c, start+1)
	}
	if got := receiveN(t, dlq, 1, 10*time.Second)[0]; got.ID != d.ID {
		t.Fatalf("dead letter id %q, want %q", got.ID, d.ID)
	}
	// The producer is usable after the refused batch.
	send(t, a, "t", nil, "next")
	n := receiveN(t, s, 1, 10*time.Second)[0]
	settle(t, s, ack, n)
}

// TestDelayedSend: a delayed message is stored at once but not delivered
// before its time; later messages of its key wait behind it, other keys
// do not.
func TestDelayedSend(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("dl", 1))
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	const delay = 400 * time.Millisecond
	at := time.Now()
	err := a.Send(t.Context(),
		ports.Message{Topic: "t", Key: "k", Payload: []byte("late"), Delay: delay},
		ports.Message{Topic: "t", Key: "k", Payload: []byte("behind")},
		ports.Message{Topic: "t", Key: "j", Payload: []byte("other")},
	)
	if err != nil {
		t.Fatal(err)
	}
	d := receiveN(t, s, 1, 10*time.Second)[0]
	if string(d.Payload) != "other" || time.Since(at) >= delay {
		t.Fatalf("first delivery %q after %v, want other before %v", d.Payload, time.Since(at), delay)
	}
	settle(t, s, ack, d)
	late := receiveN(t, s, 1, 10*time.Second)[0]
	if string(late.Payload) != "late" || time.Since(at) < delay {
		t.Fatalf("got %q after %v, want late no earlier than %v", late.Payload, time.Since(at), delay)
	}
	if _, ok := late.Headers.Lookup("sluice-not-before"); ok {
		t.Fatal("the adapter's not-before header leaked into the delivery")
	}
	receiveNone(t, s, 100*time.Millisecond)
	settle(t, s, ack, late)
	behind := receiveN(t, s, 1, 5*time.Second)[0]
	if string(behind.Payload) != "behind" {
		t.Fatalf("got %q, want behind", behind.Payload)
	}
	settle(t, s, ack, behind)
}

// TestDoubleSettle: a second settlement of a delivery changes nothing.
func TestDoubleSettle(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("ds", 1))
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	send(t, a, "t", nil, "x")
	d := receiveN(t, s, 1, 10*time.Second)[0]
	settle(t, s, ack, d)
	if err := s.Settle(t.Context(), []*ports.Delivery{d}, ack); !errors.Is(err, ports.ErrAlreadyCompleted) {
		t.Fatalf("second ack: %v, want ErrAlreadyCompleted", err)
	}
	if err := s.Settle(t.Context(), []*ports.Delivery{d}, ports.Disposition{Action: ports.Requeue}); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("requeue after ack: %v, want ErrConflict", err)
	}
	receiveNone(t, s, 200*time.Millisecond)
}

// TestMalformedHeaderIsPoison: a record with an undecodable redelivery
// count or not-before header (written by a foreign producer) is handed over
// with Delivery.Err (a poison *ports.HeaderError), never dropped or guessed.
func TestMalformedHeaderIsPoison(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("mh", 1))
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g"})
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	conf.Producer.Return.Successes = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	prod, err := sarama.NewSyncProducer(b.addrs, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for _, h := range [][2]string{
		{ports.HeaderRedeliveryCount, "three"},
		{"sluice-not-before", "tomorrow"},
	} {
		_, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: "mh.t", Value: sarama.StringEncoder("{}"),
			Headers: []sarama.RecordHeader{{Key: []byte(h[0]), Value: []byte(h[1])}}})
		if err != nil {
			t.Fatal(err)
		}
		d := receiveN(t, s, 1, 10*time.Second)[0]
		var he *ports.HeaderError
		if !errors.As(d.Err, &he) || !ports.IsPoison(d.Err) || he.Header != h[0] {
			t.Fatalf("header %s=%q: Delivery.Err = %v, want a poison *ports.HeaderError naming it", h[0], h[1], d.Err)
		}
		settle(t, s, ports.Disposition{Action: ports.DeadLetter, Reason: d.Err, Attempts: 1}, d)
	}
}
