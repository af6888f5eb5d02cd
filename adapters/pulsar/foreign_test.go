package pulsar_test

import (
	"context"
	"fmt"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// sendBare sends body with a bare producer of client c, as a program
// without sluice does: the payload only, no property, no key.
func sendBare(ctx context.Context, c pulsarclient.Client, topic string, body []byte) error {
	p, err := c.CreateProducer(pulsarclient.ProducerOptions{Topic: topic})
	if err != nil {
		return fmt.Errorf("bare producer on %s: %w", topic, err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, &pulsarclient.ProducerMessage{Payload: body}); err != nil {
		return fmt.Errorf("bare send to %s: %w", topic, err)
	}
	return nil
}

// physicalOf is the topic a harness's adapters use for topic.
func physicalOf(ctx context.Context, h tck.Harness, topic ports.Topic) (string, error) {
	a, err := h.MakeAdapter(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = a.Close(ctx) }()
	name := a.(*pulsar.Adapter).PhysicalTopic(topic)
	if name == "" {
		return "", fmt.Errorf("no physical topic for %q", topic)
	}
	return name, nil
}

// PublishForeign implements tck.ForeignProducer with a bare
// pulsar-client-go producer. The message id (ledger, entry, partition)
// is the broker's identity.
func (h *clientHarness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	name, err := physicalOf(ctx, h, topic)
	if err != nil {
		return ports.IDNone, err
	}
	c, err := pulsarclient.NewClient(pulsarclient.ClientOptions{URL: h.url})
	if err != nil {
		return ports.IDNone, err
	}
	defer c.Close()
	return ports.IDBroker, sendBare(ctx, c, name, m.Body)
}

// PublishForeign implements tck.ForeignProducer with a bare producer of
// the fake broker's client.
func (h *fakeHarness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	name, err := physicalOf(ctx, h, topic)
	if err != nil {
		return ports.IDNone, err
	}
	c := h.broker.NewClient()
	defer c.Close()
	return ports.IDBroker, sendBare(ctx, c, name, m.Body)
}

var (
	_ tck.ForeignProducer = (*clientHarness)(nil)
	_ tck.ForeignProducer = (*fakeHarness)(nil)
)
