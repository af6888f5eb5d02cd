package pulsar_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/pulsar"
	"github.com/sluicemq/sluice/adapters/pulsar/pulsartest"
	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// peerHarness is the pulsartest run's harness: a clientHarness that can
// also create an existing topology on the test broker and inspect it.
type peerHarness struct {
	*clientHarness
	b *pulsartest.Broker
}

var _ tck.Topology = (*peerHarness)(nil)

// CreateExisting implements tck.Topology: a topic in a tenant and
// namespace of the legacy program's own and a durable Shared subscription
// on it, made with the raw pulsar-client-go as that program would, and an
// adapter adopting both with Options.Existing. Publish sends with a raw
// producer. Unchanged checks with the broker's stats that the topic still
// has exactly that one subscription (nothing was added or renamed).
func (h *peerHarness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	var r [4]byte
	_, _ = rand.Read(r[:])
	physical := "persistent://legacy/billing/invoices-" + hex.EncodeToString(r[:])
	subName := "legacy-mailer"
	c, err := pulsarclient.NewClient(pulsarclient.ClientOptions{URL: h.url, OperationTimeout: 30 * time.Second})
	if err != nil {
		return tck.Existing{}, err
	}
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	if err := legacySubscription(c, physical, subName); err != nil {
		return tck.Existing{}, err
	}
	a, err := pulsar.New(ctx, pulsar.Options{Client: c, TopicPrefix: h.prefix, Logger: quiet,
		Existing: []pulsar.Existing{{Topic: topic, Physical: physical, Subscriptions: map[string]string{group: subName}}}})
	if err != nil {
		return tck.Existing{}, err
	}
	publish := legacyPublisher(c, physical)
	unchanged := func(context.Context) error {
		st, ok := h.b.Topic(physical)
		if !ok {
			return fmt.Errorf("topic %s is gone", physical)
		}
		if !slices.Equal(st.Subscriptions, []string{subName}) {
			return fmt.Errorf("topic %s has subscriptions %v, want only %s", physical, st.Subscriptions, subName)
		}
		return nil
	}
	return tck.Existing{Adapter: a, Names: "topic " + physical + ", subscription " + subName, Publish: publish, Unchanged: unchanged}, nil
}

var _ tck.Topology = (*fakeHarness)(nil)

// CreateExisting implements tck.Topology on fakepulsar: a topic and a
// durable subscription made with the fake client as a legacy program
// would, an adapter adopting them, and the fake's subscription list for
// Unchanged.
func (h *fakeHarness) CreateExisting(ctx context.Context, topic ports.Topic, group string) (tck.Existing, error) {
	physical, subName := "persistent://legacy/billing/invoices", "legacy-mailer"
	c := h.broker.NewClient()
	h.mu.Lock()
	h.clients = append(h.clients, c)
	h.mu.Unlock()
	if err := legacySubscription(c, physical, subName); err != nil {
		return tck.Existing{}, err
	}
	a, err := pulsar.New(ctx, pulsar.Options{Client: c, RequeueTick: 9 * time.Millisecond, Logger: quiet,
		Existing: []pulsar.Existing{{Topic: topic, Physical: physical, Subscriptions: map[string]string{group: subName}}}})
	if err != nil {
		return tck.Existing{}, err
	}
	publish := legacyPublisher(c, physical)
	unchanged := func(context.Context) error {
		if subs := h.broker.Subscriptions(physical); !slices.Equal(subs, []string{subName}) {
			return fmt.Errorf("topic %s has subscriptions %v, want only %s", physical, subs, subName)
		}
		return nil
	}
	return tck.Existing{Adapter: a, Names: "topic " + physical + ", subscription " + subName, Publish: publish, Unchanged: unchanged}, nil
}

// legacySubscription makes the durable Shared subscription a legacy
// program would have, with the client itself.
func legacySubscription(c pulsarclient.Client, physical, subName string) error {
	cons, err := c.Subscribe(pulsarclient.ConsumerOptions{Topic: physical, SubscriptionName: subName, Type: pulsarclient.Shared})
	if err != nil {
		return err
	}
	cons.Close()
	return nil
}

// legacyPublisher publishes as the program being migrated does: one
// plain producer per message, no sluice envelope.
func legacyPublisher(c pulsarclient.Client, physical string) func(context.Context, []byte) error {
	return func(ctx context.Context, payload []byte) error {
		p, err := c.CreateProducer(pulsarclient.ProducerOptions{Topic: physical})
		if err != nil {
			return err
		}
		defer p.Close()
		_, err = p.Send(ctx, &pulsarclient.ProducerMessage{Payload: payload})
		return err
	}
}
