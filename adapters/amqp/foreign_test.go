package amqp_test

import (
	"context"
	"fmt"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// publishRaw publishes one message with amqp091-go as a program without
// sluice does: the body, persistent, a message-id property only when id
// is set, no header. It waits for the broker's confirm.
func publishRaw(ctx context.Context, url, exchange, key string, body []byte, id string) error {
	c, err := amqp091.Dial(url)
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false,
		amqp091.Publishing{Body: body, DeliveryMode: amqp091.Persistent, MessageId: id})
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		return fmt.Errorf("raw amqp091 publish to %s/%s not confirmed: %v", exchange, key, err)
	}
	return nil
}

// PublishForeign implements tck.ForeignProducer with amqp091-go to the
// topic's exchange and routing key. The message-id property is the
// producer's id; a message without one has no identity (RabbitMQ assigns
// none that survives a redelivery).
func (h *harness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	want := ports.IDNone
	if m.ID != "" {
		want = ports.IDProducer
	}
	return want, publishRaw(ctx, h.url, h.ns+".topics", topic.Physical(".."), m.Body, m.ID)
}

var _ tck.ForeignProducer = (*harness)(nil)
