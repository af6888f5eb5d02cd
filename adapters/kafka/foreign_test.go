package kafka_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/kafka"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// produceForeign writes one record with franz-go, as a producer without
// sluice does: the value only, no header, no key.
func produceForeign(ctx context.Context, addrs []string, topic string, body []byte) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: body}).FirstErr(); err != nil {
		return fmt.Errorf("franz-go produce to %s: %w", topic, err)
	}
	return nil
}

// PublishForeign implements tck.ForeignProducer with franz-go. Kafka has
// no message-id field a producer sets: the record's identity is the
// broker's topic/partition/offset.
func (h *harness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	return ports.IDBroker, produceForeign(ctx, h.b.addrs, kafka.PhysicalTopic("tck", topic), m.Body)
}

var _ tck.ForeignProducer = (*harness)(nil)
