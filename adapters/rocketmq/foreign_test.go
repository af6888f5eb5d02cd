package rocketmq_test

import (
	"context"
	"fmt"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/sluicemq/sluice/adapters/rocketmq"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// sendBare sends body with the official v5 producer, as a program without
// sluice does: the body only, no property, no key, no tag.
func sendBare(ctx context.Context, endpoint, topic string, body []byte) error {
	p, err := rmq.NewProducer(&rmq.Config{Endpoint: endpoint, Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics(topic))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.GracefulStop()
	if _, err := p.Send(ctx, &rmq.Message{Topic: topic, Body: body}); err != nil {
		return fmt.Errorf("bare RocketMQ send to %s: %w", topic, err)
	}
	return nil
}

// PublishForeign implements tck.ForeignProducer with the official v5
// producer. The message id it assigns is the message's identity (the
// broker's, under the rule of ports.IDSource: the producer library, not
// the program, chooses it).
func (h *harness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	name, err := rocketmq.TopicName(topic)
	if err != nil {
		return ports.IDNone, err
	}
	return ports.IDBroker, sendBare(ctx, h.ep, name, m.Body)
}

var _ tck.ForeignProducer = (*harness)(nil)
