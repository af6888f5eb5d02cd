package pulsar

import (
	"context"
	"fmt"
	"strings"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/ports"
)

// checkInstanceFree refuses a Broadcast subscription whose Instance is
// already running. Each instance consumes a Shared subscription of its
// own (see the package doc for why not Exclusive), and Pulsar lets any
// number of consumers share one; so before joining it the adapter probes
// the subscription with an Exclusive consumer, which the broker refuses
// with ConsumerBusy ("subscription is of a different type") while any
// consumer is connected. The probe is closed at once; it asks for no
// messages (a zero receiver queue). This is detection, not a lock: two
// subscriptions starting at the same moment can both pass. An Instance
// left empty (random: a random one was drawn) is not checked.
func (a *Adapter) checkInstanceFree(ctx context.Context, spec ports.SubscriptionSpec, random bool, topic, name string) error {
	if spec.Mode != ports.Broadcast || random {
		return nil
	}
	probe, err := a.subscribe(ctx, pulsarclient.ConsumerOptions{
		Topic:                       topic,
		SubscriptionName:            name,
		Type:                        pulsarclient.Exclusive,
		SubscriptionInitialPosition: pulsarclient.SubscriptionPositionLatest,
		EnableZeroQueueConsumer:     true,
	})
	if err == nil {
		probe.Close()
		return nil
	}
	if msg := err.Error(); strings.Contains(msg, "ConsumerBusy") || strings.Contains(strings.ToLower(msg), "busy") {
		return &ports.InstanceSharedError{Instance: spec.Instance, Where: fmt.Sprintf(
			"its subscription %s on %s has a connected consumer: the broker refused an Exclusive probe (%v)", name, topic, err)}
	}
	return fmt.Errorf("pulsar: check that Broadcast instance %q is not running elsewhere (an Exclusive probe of %s): %w", spec.Instance, name, err)
}
