package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/internal/clitest"
	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// kcat (librdkafka) against the in-process Kafka peer: sluice reads what
// kcat -P writes (the value only) with the record's topic/partition/offset
// as its identity, and kcat -C reads what sluice writes (the payload as
// the value, the envelope as record headers).
func TestInteropKcat(t *testing.T) {
	kcat := clitest.Require(t, "kcat", "kcat")
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ns = "interop"
	a, err := kafka.New(ctx, b.config(ns, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	brokers := strings.Join(b.addrs, ",")

	t.Run("kcat -P to sluice", func(t *testing.T) {
		got := make(chan *ports.Delivery, 2)
		p := flow.New(a, ports.SubscriptionSpec{Topic: "orders", Group: "g"}, flow.WithErrorHandler(func(err error) { t.Logf("pipeline: %v", err) }))
		flow.Sink(p.Source(), func(_ context.Context, d *ports.Delivery) error { got <- d; return nil })
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer p.Stop(context.Background())
		phys := kafka.PhysicalTopic(ns, "orders")
		if _, err := clitest.Run(ctx, 20*time.Second, []byte("{\"id\":\"k-1\"}\n{\"id\":\"k-2\"}\n"), kcat, "-P", "-b", brokers, "-t", phys); err != nil {
			t.Fatal(err)
		}
		var prev string
		for i, want := range []string{`{"id":"k-1"}`, `{"id":"k-2"}`} {
			select {
			case d := <-got:
				// One partition: kafka:<topic>/0/<offset>, offsets in order.
				if string(d.Payload) != want || !strings.HasPrefix(d.ID, "kafka:"+phys+"/0/") || d.ID == prev || d.IDSource != ports.IDBroker || d.Err != nil {
					t.Fatalf("got payload %s ID %q (%s) err %v; want %s, kafka:%s/0/<offset> (broker)", d.Payload, d.ID, d.IDSource, d.Err, want, phys)
				}
				prev = d.ID
				t.Logf("kcat record %d: ID %s", i, d.ID)
			case <-ctx.Done():
				t.Fatalf("sluice never received record %d of kcat -P", i)
			}
		}
	})

	t.Run("sluice to kcat -C", func(t *testing.T) {
		if err := a.DeclareTopic(ctx, ports.TopicSpec{Topic: "paid"}); err != nil {
			t.Fatal(err)
		}
		m := ports.Message{Topic: "paid", Key: "o-1", Payload: []byte(`{"order":"o-1"}`),
			Headers: ports.NewHeaders(ports.HeaderID, "id-1", ports.HeaderType, "com.example.paid.v1")}
		if err := a.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		out, err := clitest.Run(ctx, 20*time.Second, nil, kcat, "-C", "-b", brokers, "-t", kafka.PhysicalTopic(ns, "paid"),
			"-o", "beginning", "-c", "1", "-e", "-f", "%k|%h|%s\n")
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSpace(string(out))
		for _, want := range []string{"o-1|", "ce-id=id-1", "ce-type=com.example.paid.v1", "ce-partitionkey=o-1", `|{"order":"o-1"}`} {
			if !strings.Contains(s, want) {
				t.Errorf("kcat -C printed %q, lacking %q", s, want)
			}
		}
		t.Logf("kcat -C -f '%%k|%%h|%%s': %s", s)
	})
}
