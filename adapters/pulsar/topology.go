package pulsar

import (
	"context"
	"fmt"
	"strings"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// MaxMessageBytes is the largest message Send accepts by default: a stock
// Apache Pulsar broker's maxMessageSize (5 MiB, announced to the client as
// max_message_size) less 64 KiB kept for what the frame carries besides
// the payload and the properties (the fixed metadata fields, producer
// name, sequence id and frame headers). The limit counts the payload, the
// key and the properties (sluice's headers). WithMaxMessageBytes sets
// another bound for a broker configured otherwise.
const MaxMessageBytes = 5<<20 - 64<<10

// WithMaxMessageBytes sets the largest message Send accepts (payload, key
// and properties; see MaxMessageBytes). Set it below the broker's
// maxMessageSize less 64 KiB. Default MaxMessageBytes.
func WithMaxMessageBytes(n int) Option {
	return optionFunc(func(c *config) error {
		if n <= 0 {
			return &ports.ValueError{Field: "pulsar.WithMaxMessageBytes", Reason: "must be positive"}
		}
		c.maxMessageBytes, c.maxMessageSet = n, true
		return nil
	})
}

// existing is one adopted topic (WithExisting).
type existing struct {
	physical string
	subs     map[string]string
}

// WithExisting adopts Pulsar names other programs already use for logical
// topic t: Send and subscriptions use the topic physical (a full name,
// "persistent://tenant/namespace/topic") as it is, and a LoadBalance
// group listed in subscriptions (logical group → existing subscription
// name) consumes through that subscription, so a service moving to sluice
// keeps every name byte for byte and resumes the existing cursors. Nothing
// is created or redeclared. The dead-letter topic "<t>.dlq" stays derived.
func WithExisting(t ports.Topic, physical string, subscriptions map[string]string) Option {
	return optionFunc(func(c *config) error {
		if err := t.Validate(); err != nil {
			return &ports.ValueError{Field: "pulsar.WithExisting", Reason: err.Error()}
		}
		rest, ok := strings.CutPrefix(physical, "persistent://")
		if parts := strings.Split(rest, "/"); !ok || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			return &ports.ValueError{Field: "pulsar.WithExisting", Reason: fmt.Sprintf("%q is not a full persistent topic name, persistent://tenant/namespace/topic", physical)}
		}
		if c.existing == nil {
			c.existing = map[ports.Topic]existing{}
		}
		if _, dup := c.existing[t]; dup {
			return &ports.ValueError{Field: "pulsar.WithExisting", Reason: fmt.Sprintf("%q is adopted twice", t)}
		}
		for other, e := range c.existing {
			if e.physical == physical {
				return &ports.ValueError{Field: "pulsar.WithExisting", Reason: fmt.Sprintf("%q is already the topic of %q", physical, other)}
			}
		}
		subs := make(map[string]string, len(subscriptions))
		for g, s := range subscriptions {
			if g == "" || s == "" {
				return &ports.ValueError{Field: "pulsar.WithExisting", Reason: "a subscription mapping has an empty group or name"}
			}
			subs[g] = s
		}
		c.existing[t] = existing{physical: physical, subs: subs}
		return nil
	})
}

// physicalTopic is the Pulsar topic of logical topic t: an adopted name;
// for a scoped topic "tenant/namespace/name" the native
// "persistent://tenant/namespace/<prefix>name"; otherwise
// "persistent://<tenant>/<namespace>/<prefix>t" in the adapter's
// namespace. A scoped topic in the adapter's own tenant and namespace is
// refused (it would share its physical name with the unscoped one); a
// derived name that is an adopted one is refused too.
func (a *Adapter) physicalTopic(t ports.Topic) (string, error) {
	if e, ok := a.cfg.existing[t]; ok {
		return e.physical, nil
	}
	name := a.names.topic(t)
	if sc, rest := t.Split(); !sc.IsZero() {
		if sc.Tenant == a.cfg.tenant && sc.Namespace == a.cfg.namespace {
			return "", fmt.Errorf("%w: topic %q is scoped to the adapter's own namespace %s/%s, where it would be the unscoped topic %q: use that name", ports.ErrInvalid, t, sc.Tenant, sc.Namespace, rest)
		}
		name = "persistent://" + sc.Tenant + "/" + sc.Namespace + "/" + a.cfg.prefix + rest
	}
	for other, e := range a.cfg.existing {
		if e.physical == name {
			return "", fmt.Errorf("%w: topic %q maps to %s, the adopted topic of %q (WithExisting)", ports.ErrInvalid, t, name, other)
		}
	}
	return name, nil
}

// subscriptionOf is the Pulsar subscription name of spec (defaults
// applied): an adopted one, or subscriptionName.
func (a *Adapter) subscriptionOf(spec ports.SubscriptionSpec) string {
	if e, ok := a.cfg.existing[spec.Topic]; ok && spec.Mode == ports.LoadBalance {
		if s := e.subs[spec.Group]; s != "" {
			return s
		}
	}
	return subscriptionName(spec)
}

// checkSubscription refuses what the adapter cannot honour for spec and
// returns the initial position of a new subscription.
func checkSubscription(spec ports.SubscriptionSpec) (pulsarclient.SubscriptionInitialPosition, error) {
	if spec.SingleActive {
		// Apache Pulsar tracks redelivery counts only on Shared and
		// Key_Shared subscriptions: a Failover consumer's negative acks
		// always come back with count 0, so RetryPolicy.MaxAttempts and
		// dead-lettering would never trigger.
		return 0, fmt.Errorf("%w: single-active consumption would be a Pulsar Failover subscription, whose redeliveries carry no count (the broker tracks it only for Shared): retries could never end in a dead letter (SingleActive)", ports.ErrUnsupported)
	}
	if spec.Start == ports.StartEarliest {
		return pulsarclient.SubscriptionPositionEarliest, nil
	}
	return pulsarclient.SubscriptionPositionLatest, nil
}

// maxMessageBytes is WithMaxMessageBytes, or MaxChunkedMessageBytes with
// WithChunking, or MaxMessageBytes (also for
// the zero Adapter the capability matrix reads).
func (a *Adapter) maxMessageBytes() int {
	if a.cfg.chunking && !a.cfg.maxMessageSet {
		return MaxChunkedMessageBytes
	}
	if a.cfg.maxMessageBytes > 0 {
		return a.cfg.maxMessageBytes
	}
	return MaxMessageBytes
}

// checkSize refuses m (stamped) when it is above the limit.
func (a *Adapter) checkSize(m *ports.Message) error {
	env := len(m.Key)
	for k, v := range m.Headers {
		env += len(k) + len(v) + 4 // each property is a key/value pair with two length prefixes
	}
	return m.CheckSize(a.maxMessageBytes(), env)
}

// DeclareTopic implements ports.TopicDeclarer. Retention and MaxLength are
// namespace policies of Pulsar's admin API (retention, TTL, backlog quota),
// which the binary protocol the client speaks cannot set: they are refused
// with ErrUnsupported. Groups are created as DeclareGroup does. The spec
// is recorded: a redeclaration with other properties fails with a
// *ports.RedeclareError.
func (a *Adapter) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := kit.Unsupported(a.Name()+" (namespace policies need the admin API)", a.Capabilities(), spec); err != nil {
		return err
	}
	if _, err := a.physicalTopic(spec.Topic); err != nil {
		return err
	}
	return a.declared.Declare(ctx, spec, kit.DeclareGroups(a))
}

// DeclareGroup implements ports.GroupDeclarer: it creates the group's
// durable Shared subscription at the topic's end (a consumer subscribes
// and closes; the subscription stays), so what is published from then on
// is kept for the group's first consumer. An existing subscription is
// left as it is.
func (a *Adapter) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	name, err := a.physicalTopic(topic)
	if err != nil {
		return err
	}
	c, err := a.subscribe(ctx, pulsarclient.ConsumerOptions{
		Topic: name, SubscriptionName: a.subscriptionOf(spec), Type: pulsarclient.Shared,
		SubscriptionInitialPosition: pulsarclient.SubscriptionPositionLatest,
		// No permits: nothing is dispatched to this short-lived consumer.
		EnableZeroQueueConsumer: true,
	})
	if err != nil {
		return fmt.Errorf("pulsar: declare group %q of %q: %w", group, topic, err)
	}
	c.Close()
	return nil
}
