package amqp

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/ports"
)

// DeclareGroup implements ports.GroupDeclarer: it declares the durable
// queue of the LoadBalance group on topic and binds it, without starting a
// consumer, so messages sent from then on are kept for the group until its
// first consumer subscribes (Watermill's SubscribeInitialize). It is
// idempotent; the queue has the adapter's queue type and no expiry.
func (a *Adapter) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	if err := spec.Validate(); err != nil {
		return err
	}
	ch, err := a.pubC.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := a.topo.declareQueue(ch, a.topo.lbQueue(topic, group), topic, a.topo.queueArgs(0)); err != nil {
		return fmt.Errorf("amqp: declare group %q of %s: %w", group, topic, err)
	}
	return nil
}

var _ ports.GroupDeclarer = (*Adapter)(nil)
