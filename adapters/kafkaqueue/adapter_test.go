package kafkaqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/adapters/kafkaqueue"
	"github.com/sluicemq/sluice/ports"
)

// subscribe subscribes a to topic in group g.
func subscribe(t *testing.T, a ports.Adapter, topic ports.Topic, g string) ports.Subscription {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: topic, Group: g, InFlight: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// receive returns the next delivery of s, failing after within.
func receive(t *testing.T, s ports.Subscription, within time.Duration, what string) *ports.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	ds, err := s.Receive(ctx, 1)
	if err != nil {
		t.Fatalf("%s: nothing received within %v: %v", what, within, err)
	}
	return ds[0]
}

// none checks that s receives nothing for quiet (the only wait on time
// alone: proving that a record does not come).
func none(t *testing.T, s ports.Subscription, quiet time.Duration, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), quiet)
	defer cancel()
	if ds, err := s.Receive(ctx, 1); err == nil {
		t.Fatalf("%s: received %s (redelivery count %d)", why, ds[0].ID, ds[0].RedeliveryCount)
	}
}

func send(t *testing.T, a ports.Adapter, topic ports.Topic, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := ports.Message{Topic: topic, Key: "k-" + id, Payload: []byte(`{"id":"` + id + `"}`), Headers: ports.NewHeaders(ports.HeaderID, id)}
	if err := a.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
}

func settle(t *testing.T, s ports.Subscription, d *ports.Delivery, disp ports.Disposition) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.Settle(ctx, []*ports.Delivery{d}, disp)
}

// Release (a requeue) hands the record back at once: the broker delivers
// it again with its delivery count one higher; Accept ends it.
func TestReleaseRedeliversWithCountPlusOne(t *testing.T) {
	b := newBroker(t, 1)
	a := b.adapter(t, b.options("rel", 1))
	s := subscribe(t, a, "orders", "g")
	send(t, a, "orders", "m-1")
	d := receive(t, s, 10*time.Second, "first delivery")
	if d.ID != "m-1" || d.RedeliveryCount != 0 || d.Facts.Get("delivery-count") != "1" {
		t.Fatalf("first delivery %s count %d facts %v, want m-1, 0, delivery-count 1", d.ID, d.RedeliveryCount, d.Facts)
	}
	if err := settle(t, s, d, ports.Disposition{Action: ports.Requeue}); err != nil {
		t.Fatal(err)
	}
	d = receive(t, s, testLock/2, "the released record, before its lock would have lapsed")
	if d.ID != "m-1" || d.RedeliveryCount != 1 || d.Facts.Get("delivery-count") != "2" {
		t.Fatalf("redelivery %s count %d facts %v, want m-1, 1, delivery-count 2", d.ID, d.RedeliveryCount, d.Facts)
	}
	if err := settle(t, s, d, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	none(t, s, 2*testLock, "an accepted record must not come back")
}

// The broker archives a record delivered group.share.delivery.count.limit
// times; the adapter reads the limit and requeues a record at it by a
// counted copy, so that a requeue never loses it, whatever the retry
// policy. The copy goes to the topic, read by every share group: the other
// groups accept it unseen.
func TestRequeueAtTheDeliveryLimitIsACopy(t *testing.T) {
	b := newLimitBroker(t, 3)
	a := b.adapter(t, b.options("limit", 1))
	if got := a.Capabilities().DeliveryLimit; got != 3 {
		t.Fatalf("Capabilities().DeliveryLimit = %d, want the broker's 3", got)
	}
	if got := b.adapter(t, kafkaqueue.Options{Brokers: b.addrs, Namespace: "limit", DeliveryLimit: 7}).Capabilities().DeliveryLimit; got != 7 {
		t.Fatalf("with Options.DeliveryLimit 7 the adapter declares %d", got)
	}
	s, other := subscribe(t, a, "orders", "g"), subscribe(t, a, "orders", "h")
	send(t, a, "orders", "m-1")
	for n := range 7 { // past the limit twice over
		d := receive(t, s, 10*time.Second, fmt.Sprintf("delivery %d", n+1))
		if d.ID != "m-1" || d.RedeliveryCount != n {
			t.Fatalf("delivery %d: %s with redelivery count %d, want m-1 with %d", n+1, d.ID, d.RedeliveryCount, n)
		}
		if err := settle(t, s, d, ports.Disposition{Action: ports.Requeue}); err != nil {
			t.Fatal(err)
		}
	}
	d := receive(t, s, 10*time.Second, "delivery 8")
	if err := settle(t, s, d, ports.Disposition{Action: ports.Ack}); err != nil || d.RedeliveryCount != 7 {
		t.Fatalf("delivery 8: redelivery count %d, ack %v; want 7, nil", d.RedeliveryCount, err)
	}
	none(t, s, 2*time.Second, "an accepted record must not come back")
	d = receive(t, other, 10*time.Second, "the other group's delivery")
	if err := settle(t, other, d, ports.Disposition{Action: ports.Ack}); err != nil || d.ID != "m-1" || d.RedeliveryCount != 0 {
		t.Fatalf("the other group got %s with count %d (ack %v), want m-1 with 0", d.ID, d.RedeliveryCount, err)
	}
	none(t, other, 2*time.Second, "the other group must not see the first group's requeue copies")
}

// A record acquired for its last allowed delivery and not settled when its
// subscription stops would be archived if released: the subscription
// requeues it as a counted copy (confirmed, then the original accepted),
// which the group's next member receives, and which a dead letter then
// moves, readable, to "<topic>.dlq". The other group sees the record once.
func TestStopAtTheDeliveryLimitRequeuesACopy(t *testing.T) {
	b := newLimitBroker(t, 3)
	a := b.adapter(t, b.options("limitstop", 1))
	s, other, dead := subscribe(t, a, "orders", "g"), subscribe(t, a, "orders", "h"), subscribe(t, a, ports.DeadLetterTopic("orders"), "dlq")
	send(t, a, "orders", "m-1")
	for n := range 2 {
		if err := settle(t, s, receive(t, s, 10*time.Second, fmt.Sprintf("delivery %d", n+1)), ports.Disposition{Action: ports.Requeue}); err != nil {
			t.Fatal(err)
		}
	}
	if d := receive(t, s, 10*time.Second, "the last delivery the broker allows"); d.RedeliveryCount != 2 {
		t.Fatalf("delivery 3 has redelivery count %d, want 2", d.RedeliveryCount)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop with the record at its limit unsettled: %v", err)
	}
	next := subscribe(t, a, "orders", "g")
	d := receive(t, next, 10*time.Second, "the record stopped unsettled at its limit (archived if released)")
	if d.ID != "m-1" || d.RedeliveryCount != 3 {
		t.Fatalf("after the stop: %s with redelivery count %d, want m-1 with 3", d.ID, d.RedeliveryCount)
	}
	if err := settle(t, next, d, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("given up")}); err != nil {
		t.Fatal(err)
	}
	dl := receive(t, dead, 10*time.Second, "the dead letter of the requeue copy")
	if dl.ID != "m-1" || dl.Headers.Get(ports.HeaderDeadLetterReason) != "given up" {
		t.Fatalf("dead letter %s reason %q, want m-1 given up", dl.ID, dl.Headers.Get(ports.HeaderDeadLetterReason))
	}
	d = receive(t, other, 10*time.Second, "the other group's delivery")
	if err := settle(t, other, d, ports.Disposition{Action: ports.Ack}); err != nil || d.ID != "m-1" || d.RedeliveryCount != 0 {
		t.Fatalf("the other group got %s with count %d (ack %v), want m-1 with 0", d.ID, d.RedeliveryCount, err)
	}
	none(t, other, 2*time.Second, "the other group must not see the first group's copy")
}

// A dead letter is a confirmed copy on "<topic>.dlq", then Reject: the copy
// is readable, the original never comes back.
func TestDeadLetterRejectsAfterConfirmedCopy(t *testing.T) {
	b := newBroker(t, 1)
	a := b.adapter(t, b.options("dl", 1))
	dead := subscribe(t, a, ports.DeadLetterTopic("orders"), "dlq")
	s := subscribe(t, a, "orders", "g")
	send(t, a, "orders", "m-2")
	d := receive(t, s, 10*time.Second, "the poison record")
	if err := settle(t, s, d, ports.Disposition{Action: ports.DeadLetter, Reason: errors.New("total is negative")}); err != nil {
		t.Fatal(err)
	}
	c := receive(t, dead, 10*time.Second, "the dead-letter copy")
	if c.ID != "m-2" || c.Headers.Get(ports.HeaderDeadLetterReason) != "total is negative" || string(c.Payload) != `{"id":"m-2"}` {
		t.Fatalf("dead-letter copy %s reason %q payload %s", c.ID, c.Headers.Get(ports.HeaderDeadLetterReason), c.Payload)
	}
	none(t, s, 2*testLock, "a rejected record must not come back")
}

// A handler slower than the acquisition lock keeps its record while the
// adapter renews the lock, up to RenewFor; past it the lock lapses and the
// record goes to another member, and the late acknowledgement fails.
func TestSlowHandlerRenewedUpToTheBound(t *testing.T) {
	b := newBroker(t, 1)
	o := b.options("renew", 1)
	o.RenewFor = 4 * testLock
	a := b.adapter(t, o)
	s := subscribe(t, a, "orders", "g")
	other := subscribe(t, b.adapter(t, o), "orders", "g")
	send(t, a, "orders", "m-3")
	d := receive(t, s, 10*time.Second, "the slow record")
	none(t, other, 2*testLock, "a renewed record must not go to another member")
	if err := settle(t, s, d, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatalf("ack after %v, within RenewFor: %v", 2*testLock, err)
	}

	o.RenewFor = testLock / 2
	short := subscribe(t, b.adapter(t, o), "orders", "g2")
	send(t, a, "orders", "m-4")
	held := receive(t, short, 10*time.Second, "the record held past RenewFor")
	late := subscribe(t, b.adapter(t, o), "orders", "g2")
	again := receive(t, late, 4*testLock, "the record whose renewal bound passed, at another member")
	if again.ID != "m-4" || again.RedeliveryCount != 1 {
		t.Fatalf("redelivered %s with count %d, want m-4 with 1", again.ID, again.RedeliveryCount)
	}
	if err := settle(t, short, held, ports.Disposition{Action: ports.Ack}); err == nil {
		t.Fatal("the ack of a record whose lock lapsed succeeded")
	}
}

// A member that dies with records out: the broker sees its connections
// drop and hands the records to another member, counted as redelivered.
func TestKilledConsumerRecordsComeBack(t *testing.T) {
	b := newBroker(t, 1)
	o := b.options("kill", 1)
	a := b.adapter(t, o)
	s := subscribe(t, a, "orders", "g")
	send(t, a, "orders", "m-5")
	send(t, a, "orders", "m-6")
	got := map[string]bool{}
	for len(got) < 2 {
		got[receive(t, s, 10*time.Second, "the records the member will die with").ID] = true
	}
	kafkaqueue.Kill(a)
	next := subscribe(t, b.adapter(t, o), "orders", "g")
	for range 2 {
		d := receive(t, next, 4*testLock, "a record of the killed member")
		if !got[d.ID] || d.RedeliveryCount != 1 {
			t.Fatalf("got %s with count %d, want one of %v with count 1", d.ID, d.RedeliveryCount, got)
		}
		delete(got, d.ID)
	}
}

// kafka:// and kafkaqueue:// read each other's records on one cluster:
// the same topic names, payload, key and envelope headers, each one's
// batches compressed with a codec of its own.
func TestInteropWithKafkaAdapter(t *testing.T) {
	b := newBroker(t, 1)
	qo := b.options("interop", 1)
	qo.Compression = "zstd"
	q := b.adapter(t, qo)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := kafka.New(ctx, kafka.Options{Brokers: b.addrs, Namespace: "interop", Partitions: 1, Compression: "lz4"})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close(context.Background())
	check := func(d *ports.Delivery, id string) {
		t.Helper()
		if d.ID != id || d.Key != "k-"+id || string(d.Payload) != `{"id":"`+id+`"}` || d.Headers.Get(ports.HeaderPartitionKey) != "k-"+id {
			t.Fatalf("got %s key %q payload %s headers %v; want %s", d.ID, d.Key, d.Payload, d.Headers, id)
		}
	}
	fromKafka := subscribe(t, q, "orders", "queue")
	toKafka := subscribe(t, k, "paid", "classic")
	send(t, k, "orders", "k2q")
	d := receive(t, fromKafka, 20*time.Second, "kafka:// to kafkaqueue://")
	check(d, "k2q")
	if err := settle(t, fromKafka, d, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
	send(t, q, "paid", "q2k")
	d = receive(t, toKafka, 20*time.Second, "kafkaqueue:// to kafka://")
	check(d, "q2k")
	if err := settle(t, toKafka, d, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

// A port where nothing listens fails New at once with ports.ErrRefused.
func TestNewRefusedFailsAtOnce(t *testing.T) {
	opentest.RefusedAtOnce(t, func(ctx context.Context, addr string) (ports.Adapter, error) {
		return kafkaqueue.New(ctx, kafkaqueue.Options{Brokers: []string{addr}})
	})
}

// A compression that names no codec fails New with ports.ErrInvalid,
// before any connection.
func TestNewRefusesAnUnknownCompression(t *testing.T) {
	_, err := kafkaqueue.New(context.Background(), kafkaqueue.Options{Brokers: []string{"127.0.0.1:1"}, Compression: "brotli"})
	if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "none, snappy, lz4, zstd or gzip") {
		t.Fatalf(`New with Compression "brotli" = %v, want ErrInvalid naming the codecs`, err)
	}
}

// An adopted topic whose Kafka name is malformed or empty fails New with
// ports.ErrInvalid, before any connection.
func TestNewRefusesMalformedAdoptedTopics(t *testing.T) {
	for _, topics := range []map[ports.Topic]string{{"orders": "legacy orders"}, {"orders": ""}} {
		_, err := kafkaqueue.New(context.Background(), kafkaqueue.Options{Brokers: []string{"127.0.0.1:1"}, Existing: &kafkaqueue.Existing{Topics: topics}})
		if !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("Existing.Topics %v: New = %v, want ErrInvalid", topics, err)
		}
	}
}

// A SASL mechanism or password without a user, or an unknown mechanism,
// fails New at once (it was ignored: no SASL at all).
func TestNewRefusesIncompleteSASL(t *testing.T) {
	for _, s := range []kafkaqueue.SASL{{Password: "secret"}, {Mechanism: "scram-sha-256"}, {User: "u", Mechanism: "gssapi"}} {
		_, err := kafkaqueue.New(context.Background(), kafkaqueue.Options{Brokers: []string{"127.0.0.1:1"}, SASL: s})
		if !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("SASL %+v: New = %v, want ErrInvalid", s, err)
		}
	}
}

// With the lock renewal off, a record nobody settles is forgotten once its
// lock has lapsed (the broker took it back): the subscription holds it no
// longer, and its fetches go back to long polls.
func TestUnsettledRecordForgottenWhenItsLockLapses(t *testing.T) {
	b := newBroker(t, 1)
	o := b.options("lapse", 1)
	o.RenewFor = -1
	a := b.adapter(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := kafkaqueue.DriverSubscribe(ctx, a, ports.SubscriptionSpec{Topic: "orders", Group: "g", InFlight: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	send(t, a, "orders", "m-1")
	if recs, err := s.ReceiveBatch(ctx, 1); err != nil || len(recs) != 1 {
		t.Fatalf("ReceiveBatch = %d record(s), %v; want 1", len(recs), err)
	}
	if n := kafkaqueue.Held(s); n != 1 {
		t.Fatalf("held %d record(s) after the delivery, want 1", n)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(3 * testLock); kafkaqueue.Held(s) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("still holding %d record(s) %v after its lock (%v) lapsed", kafkaqueue.Held(s), 3*testLock, testLock)
		}
		<-tick.C
	}
}
