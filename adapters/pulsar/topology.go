package pulsar

import (
	"context"
	"fmt"
	"strings"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// physicalTopic is the Pulsar topic of logical topic t: an adopted name;
// for a scoped topic "tenant/namespace/name" the native
// "persistent://tenant/namespace/<prefix>name"; otherwise
// "persistent://<tenant>/<namespace>/<prefix>t" in the adapter's
// namespace. A scoped topic in the adapter's own tenant and namespace is
// refused (it would share its physical name with the unscoped one); a
// derived name that is an adopted one is refused too.
func (c *conn) physicalTopic(t ports.Topic) (string, error) {
	for _, e := range c.o.Existing {
		if e.Topic == t {
			return e.Physical, nil
		}
	}
	name := "persistent://" + c.o.Tenant + "/" + c.o.Namespace + "/" + c.o.TopicPrefix + string(t)
	if sc, rest := t.Split(); !sc.IsZero() {
		if sc.Tenant == c.o.Tenant && sc.Namespace == c.o.Namespace {
			return "", fmt.Errorf("%w: topic %q is scoped to the adapter's own namespace %s/%s, where it would be the unscoped topic %q: use that name", ports.ErrInvalid, t, sc.Tenant, sc.Namespace, rest)
		}
		name = "persistent://" + sc.Tenant + "/" + sc.Namespace + "/" + c.o.TopicPrefix + rest
	}
	for _, e := range c.o.Existing {
		if e.Physical == name {
			return "", fmt.Errorf("%w: topic %q maps to %s, the adopted topic of %q (Options.Existing)", ports.ErrInvalid, t, name, e.Topic)
		}
	}
	return name, nil
}

// subscriptionOf is the Pulsar subscription name of spec: an adopted one;
// the group for LoadBalance; "<group>.<instance>" for Broadcast
// ("broadcast.<instance>" without a group).
func (c *conn) subscriptionOf(spec ports.SubscriptionSpec) string {
	if spec.Mode == ports.LoadBalance {
		for _, e := range c.o.Existing {
			if s := e.Subscriptions[spec.Group]; e.Topic == spec.Topic && s != "" {
				return s
			}
		}
		return spec.Group
	}
	group := spec.Group
	if group == "" {
		group = "broadcast"
	}
	return group + "." + spec.Instance
}

// DeclareTopic records spec (a best-effort topic's sends go to its
// non-persistent twin; another spec for it is a *ports.RedeclareError) and
// creates its groups. Retention and MaxLength (admin API namespace
// policies) are refused by the portable layer.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	if _, err := c.physicalTopic(spec.Topic); err != nil {
		return err
	}
	return c.declared.Declare(ctx, spec, kit.DeclareGroups(c))
}

// DeclareGroup creates the group's durable Shared subscription at the
// topic's end (a consumer without permits subscribes and closes; the
// subscription stays), so what is published from then on is kept for the
// group's first consumer. An existing subscription is left as it is.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	name, err := c.physicalTopic(topic)
	if err != nil {
		return err
	}
	cons, err := c.subscribe(ctx, pulsarclient.ConsumerOptions{
		Topic: name, SubscriptionName: c.subscriptionOf(ports.SubscriptionSpec{Topic: topic, Group: group}),
		Type: pulsarclient.Shared, SubscriptionInitialPosition: pulsarclient.SubscriptionPositionLatest,
		EnableZeroQueueConsumer: true,
	})
	if err != nil {
		return fmt.Errorf("declare group %q of %q: %w", group, topic, err)
	}
	cons.Close()
	return nil
}

// checkInstanceFree refuses a Broadcast subscription whose Instance is
// already running. Each instance consumes a Shared subscription of its
// own (an Exclusive one would keep no redelivery count), and Pulsar lets
// any number of consumers share one; so before joining it the driver
// probes the subscription with an Exclusive consumer without permits,
// which the broker refuses with ConsumerBusy while any consumer is
// connected. This is detection, not a lock: two subscriptions starting at
// the same moment can both pass.
func (c *conn) checkInstanceFree(ctx context.Context, spec ports.SubscriptionSpec, topic, name string) error {
	if spec.Mode != ports.Broadcast {
		return nil
	}
	probe, err := c.subscribe(ctx, pulsarclient.ConsumerOptions{
		Topic: topic, SubscriptionName: name, Type: pulsarclient.Exclusive,
		SubscriptionInitialPosition: pulsarclient.SubscriptionPositionLatest, EnableZeroQueueConsumer: true,
	})
	if err == nil {
		probe.Close()
		return nil
	}
	// The broker's ConsumerBusy reaches the caller as text only.
	if strings.Contains(strings.ToLower(err.Error()), "busy") {
		return &ports.InstanceSharedError{Instance: spec.Instance, Where: fmt.Sprintf(
			"its subscription %s on %s has a connected consumer: the broker refused an Exclusive probe (%v)", name, topic, err)}
	}
	return fmt.Errorf("check that Broadcast instance %q is not running elsewhere: %w", spec.Instance, err)
}

// Best effort is a non-persistent topic: the broker stores nothing and
// drops a message for every consumer without permits at that moment. A
// consumer's permits reach the broker after Subscribe returned, so a
// best-effort Subscribe publishes probes (ProbeProperty) until one comes
// back to it. Every sluice subscription drops probes unseen; another
// consumer sees them as empty messages with that property.

// ProbeProperty marks the empty probe messages a best-effort Subscribe
// publishes to the non-persistent topic it joined.
const ProbeProperty = "sluice-probe"

// probeEvery paces the probes while a new consumer's permits are on their
// way.
const probeEvery = 20 * time.Millisecond

// awaitPermits publishes probes to s's non-persistent topic until one
// reaches s's consumer, or ctx ends. Messages that arrive meanwhile are
// kept for ReceiveBatch.
func (s *sub) awaitPermits(ctx context.Context, topic string) error {
	id := ports.NewID()
	p, err := s.c.producer(ctx, topic)
	if err != nil {
		return fmt.Errorf("best-effort subscribe to %s: %w", topic, err)
	}
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		if _, err := p.Send(ctx, &pulsarclient.ProducerMessage{Properties: map[string]string{ProbeProperty: id}}); err != nil {
			return fmt.Errorf("best-effort subscribe to %s: probe: %w", topic, err)
		}
		for waiting := true; waiting; {
			select {
			case cm, ok := <-s.consumer.Chan():
				if !ok {
					return fmt.Errorf("consumer of %s closed: %w", s.name, ports.ErrClosed)
				}
				mine, probe := cm.Message.Properties()[ProbeProperty]
				if !probe {
					s.early = append(s.early, cm.Message)
					continue
				}
				_ = s.consumer.Ack(cm.Message)
				if mine == id {
					return nil
				}
			case <-tick.C:
				waiting = false
			case <-ctx.Done():
				return fmt.Errorf("best-effort subscribe to %s: no probe came back (the consumer's permits did not reach the broker): %w", topic, ctx.Err())
			}
		}
	}
}
