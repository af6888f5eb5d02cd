package amqp

import (
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// sendItem validates m, checks its size against Options.MaxMessageBytes
// (before anything touches the broker: a *ports.SizeError, which is
// ErrInvalid, so a publisher that retries unconfirmed sends does not retry
// it) and builds its publish: to the topic's exchange and routing key
// (target), transient for QoS BestEffort.
func (a *Adapter) sendItem(m *ports.Message, now string) (item, error) {
	if err := m.Validate(); err != nil {
		return item{}, err
	}
	if err := m.CheckSize(a.opts.MaxMessageBytes, 0); err != nil {
		return item{}, err
	}
	if _, ok := a.existing.topic(m.Topic); ok && m.Delay > 0 {
		return item{}, fmt.Errorf("%w: amqp: topic %q is adopted (Options.Existing): a delayed message would come back through the namespace exchange %q, which does not reach the adopted exchange; send it without Delay", ports.ErrUnsupported, string(m.Topic), a.topo.topics)
	}
	exch, key := a.topo.target(m.Topic)
	it := item{exch: exch, key: key, pub: encodeStamped(m.Headers, m.Payload, now, m.Key), mandatory: !a.opts.DropUnroutable}
	if m.QoS == ports.BestEffort {
		it.pub.DeliveryMode = amqp.Transient
	}
	return it, nil
}

// checkSpec refuses what RabbitMQ cannot do for spec (ErrUnsupported,
// saying why).
func (a *Adapter) checkSpec(spec ports.SubscriptionSpec) error {
	if spec.Start == ports.StartEarliest {
		return fmt.Errorf("%w: amqp: SubscriptionSpec.Start StartEarliest: a RabbitMQ queue holds only what was routed to it after it was declared, so a new group has no history to start from (declare the group ahead with TopicSpec.Groups or DeclareGroup to keep messages for it)", ports.ErrUnsupported)
	}
	if spec.Mode == ports.Broadcast {
		// "<ns>/<topic>/bc/<group>/<instance>": a '/' in either part would
		// let two instances name one queue (group "a/b" with instance "c",
		// group "a" with instance "b/c") and share one copy silently.
		for _, f := range []struct{ field, value string }{{"Group", spec.Group}, {"Instance", spec.Instance}} {
			if strings.Contains(f.value, "/") {
				return &ports.ValueError{Field: "SubscriptionSpec." + f.field, Reason: fmt.Sprintf("%q: a BROADCAST %s must not contain '/' on amqp (group and instance are the last two '/'-separated parts of the instance's queue name)", f.value, strings.ToLower(f.field))}
			}
		}
	}
	if _, ok := a.existing.queue(spec.Topic, spec.Group); ok && spec.SingleActive && spec.Mode == ports.LoadBalance {
		return fmt.Errorf("%w: amqp: SubscriptionSpec.SingleActive on adopted queue %q: single-active is the queue argument x-single-active-consumer, fixed when the queue was declared, and sluice never redeclares an adopted queue (declare it with that argument, and subscribe without SingleActive)", ports.ErrUnsupported, a.existing.Groups[ExistingGroup{Topic: spec.Topic, Group: spec.Group}])
	}
	return nil
}
