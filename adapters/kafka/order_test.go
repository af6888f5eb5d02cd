package kafka_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// produceAged writes one produce batch to the namespace's topic with
// franz-go: record i has key keys[i], value values[i] and a producer
// timestamp i hours older than the first (as skewed producer clocks, or
// timestamps the producers set, make them).
func produceAged(t *testing.T, b *broker, ns string, topic ports.Topic, keys, values []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	newest := time.Now()
	var recs []*kgo.Record
	for i := range values {
		recs = append(recs, &kgo.Record{Topic: kafka.PhysicalTopic(ns, topic), Key: []byte(keys[i]),
			Value: []byte(values[i]), Timestamp: newest.Add(-time.Duration(i) * time.Hour)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// TestPartitionOrderIgnoresProducerTimestamps: records are handed out in
// offset order within a partition even when their timestamps go
// backwards: a key's order is its partition's order.
func TestPartitionOrderIgnoresProducerTimestamps(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("ts", 1))
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g", InFlight: 16})
	want := []string{"r0", "r1", "r2", "r3", "r4"}
	produceAged(t, b, "ts", "t", []string{"k", "k", "k", "k", "k"}, want)

	var got []string
	for range want { // one record of the key is out at a time
		d := receiveN(t, s, 1, 10*time.Second)
		got = append(got, string(d[0].Payload))
		settle(t, s, ack, d...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("handed out %q, want the partition's order %q", got, want)
	}
}

// TestCommitNeverPassesARecordOutWhenTimestampsGoBackwards: a record the
// key filter skips, older by its timestamp than the record before it, is
// not committed past that record while it is out (a crash then would
// lose it).
func TestCommitNeverPassesARecordOutWhenTimestampsGoBackwards(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("tc", 1))
	s := subscribe(t, a, ports.SubscriptionSpec{Topic: "t", Group: "g", KeyFilter: "A"})
	produceAged(t, b, "tc", "t", []string{"A", "B"}, []string{"kept", "skipped"})

	d := receiveN(t, s, 1, 10*time.Second)[0]
	flush(t, s)
	if c, out := b.committed(t, "tc.g", "tc.t", 0), offsetOf(t, d); c > out {
		t.Fatalf("committed %d while offset %d is out: a crash now loses it", c, out)
	}
	settle(t, s, ack, d)
	// Its claim may have handed the skipped record over after the kept one:
	// the subscription takes it, done at once, with its next receive, and
	// the commit passes it then.
	want, deadline := offsetOf(t, d)+2, time.Now().Add(10*time.Second)
	for c := b.committed(t, "tc.g", "tc.t", 0); c != want; c = b.committed(t, "tc.g", "tc.t", 0) {
		if time.Now().After(deadline) {
			t.Fatalf("committed %d 10s after the ack, want %d (both records done)", c, want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		ds, _ := s.Receive(ctx, 1)
		cancel()
		if len(ds) > 0 {
			t.Fatalf("received %q: the key filter let a record of another key through", ds[0].Payload)
		}
		flush(t, s)
	}
}

// TestDecodeRunsOnThePartitions: a pipeline whose source is decoded has
// its payloads decoded where the partitions are read (ports.Predecoder):
// a record sent after Start arrives decoded, and one that does not decode
// is dead-lettered with the reason.
func TestDecodeRunsOnThePartitions(t *testing.T) {
	b := newBroker(t)
	a := b.adapter(t, b.config("pd", 2))
	dlq := subscribe(t, a, ports.SubscriptionSpec{Topic: "t.dlq", Group: "dlq"})
	type reading struct {
		Device string `json:"device"`
	}
	handled := make(chan bool, 1)
	p := flow.New(a, ports.SubscriptionSpec{Topic: "t", Group: "g"}, flow.WithErrorHandler(func(err error) { t.Logf("pipeline: %v", err) }))
	flow.Sink(flow.Decode[reading](p.Source()), func(ctx context.Context, r reading) error {
		handled <- r.Device == "d1" && flow.DeliveryFrom(ctx).Decoded != nil
		return nil
	})
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	}()
	send(t, a, "t", nil, `{"device":"d1"}`, `{"device":`)
	select {
	case ok := <-handled:
		if !ok {
			t.Fatal("the handler got the record, but not decoded on its partition's goroutine")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the decodable record was not handled within 10s")
	}
	dl := receiveN(t, dlq, 1, 10*time.Second)[0]
	if string(dl.Payload) != `{"device":` || !strings.Contains(dl.Headers.Get(ports.HeaderDeadLetterReason), "decode") {
		t.Fatalf("dead letter %q with reason %q, want the undecodable payload and a decode error", dl.Payload, dl.Headers.Get(ports.HeaderDeadLetterReason))
	}
}
