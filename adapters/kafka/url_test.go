package kafka_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/internal/opentest"
	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Opening kafka:// connects to the cluster: here kfake, an in-process
// Kafka wire-protocol peer (not Apache Kafka).
func TestOpenKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var logs opentest.LogBuffer
	raw := "kafka://" + strings.Join(c.ListenAddrs(), ",") + "/opener?start=oldest&session_timeout=2s&heartbeat_interval=100ms&partitions=2&compression=snappy"
	a, err := adapters.Open(ctx, raw, adapters.WithLogger(logs.Logger()))
	if err != nil {
		t.Fatalf("Open(%q): %v", raw, err)
	}
	defer opentest.Close(t, a)
	if _, ok := adapters.Unwrap(a).(*kafka.Adapter); !ok {
		t.Fatalf("Unwrap = %T", adapters.Unwrap(a))
	}
	if !strings.Contains(logs.String(), `"adapter":"kafka"`) {
		t.Errorf("no start-up line: %s", logs.String())
	}
	sub, err := a.Subscribe(ctx, ports.SubscriptionSpec{Topic: "greetings", Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(context.Background())
	if err := flow.Send(ctx, a, "greetings", "hello"); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || string(ds[0].Payload) != `"hello"` {
		t.Fatalf("Receive = %v, %v", ds, err)
	}
	if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Ack}); err != nil {
		t.Fatal(err)
	}
}

func TestOpenKafkaRejects(t *testing.T) {
	ctx := context.Background()
	for raw, want := range map[string]string{
		"kafka://":                               "kafka:// needs at least one broker address",
		"kafka://h:9092/ns?namespace=other":      "given both as the URL path and as the namespace parameter",
		"kafka://h:9092?start=yesterday":         `parameter start: "yesterday" is not newest or oldest`,
		"kafka://h:9092?partitions=0":            "parameter partitions",
		"kafka://h:9092?heartbeat_interval=soon": "parameter heartbeat_interval",
		"kafka://h:9092?acks=1":                  "parameter acks: unknown for kafka://",
		"kafka://h:9092?create_topics=perhaps":   "parameter create_topics",
		"kafka://h:9092/bad%20ns":                "kafka.Options.Namespace",
		"kafka://h:9092?compression=brotli":      "parameter compression",
	} {
		a, err := adapters.Open(ctx, raw)
		if err == nil {
			opentest.Close(t, a)
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want ErrInvalid saying %q", raw, err, want)
		}
	}
	if _, err := kafka.New(ctx, kafka.Options{Brokers: []string{"h:9092"}, Compression: "brotli"}); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "Compression") {
		t.Errorf(`New with Compression "brotli" = %v, want ErrInvalid naming Compression`, err)
	}
	if _, err := adapters.Open(ctx, "kafka://h:9092", adapters.WithTLS(&tls.Config{})); err == nil || !strings.Contains(err.Error(), "use kafka+tls://") {
		t.Errorf("WithTLS on kafka:// = %v", err)
	}
}

// An unreachable broker fails Open at once, naming the address and what
// to check.
func TestOpenUnreachableNamesAddressAndWhatToCheck(t *testing.T) {
	took, err := opentest.OpenFails(t, "kafka://127.0.0.1:1")
	if took > 30*time.Second {
		t.Fatalf("Open took %v", took)
	}
	if msg := err.Error(); !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "check that a Kafka broker listens") {
		t.Fatalf("Open = %v, want the address and what to check", err)
	}
}
