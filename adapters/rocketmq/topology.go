package rocketmq

import (
	"context"
	"fmt"
	"strings"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// MaxMessageBytes is the largest message Send accepts: Apache RocketMQ's
// default maxMessageSize (4 MiB), which the broker checks against the
// whole stored message, so the adapter counts the topic name, the keys
// and the user properties (sluice's headers) with the body. The proxy
// announces its own body limit to the client; a smaller one refuses a
// message the adapter let through with the proxy's error.
const MaxMessageBytes = 4 << 20

// existing is one adopted topic (WithExisting).
type existing struct {
	physical string
	groups   map[string]string
}

// WithExisting adopts RocketMQ names other programs already use for
// logical topic t: Send and subscriptions use the RocketMQ topic physical
// as it is, and a LoadBalance group listed in groups (logical group →
// existing consumer group) consumes as that consumer group, so a service
// moving to sluice keeps every name byte for byte. Nothing is created:
// the topic and groups are an administrator's. Groups not listed keep
// their own names. The dead-letter topic "<t>.dlq" stays derived.
func WithExisting(t ports.Topic, physical string, groups map[string]string) Option {
	return func(c *config) error {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("rocketmq: WithExisting: %w", err)
		}
		if err := rocketName("existing topic", physical); err != nil {
			return err
		}
		if c.existing == nil {
			c.existing = map[ports.Topic]existing{}
		}
		if _, dup := c.existing[t]; dup {
			return fmt.Errorf("%w: rocketmq: WithExisting: %q is adopted twice", ports.ErrInvalid, t)
		}
		for other, e := range c.existing {
			if e.physical == physical {
				return fmt.Errorf("%w: rocketmq: WithExisting: %q is already the topic of %q", ports.ErrInvalid, physical, other)
			}
		}
		g := make(map[string]string, len(groups))
		for k, v := range groups {
			if err := rocketName("existing consumer group", v); err != nil {
				return err
			}
			g[k] = v
		}
		c.existing[t] = existing{physical: physical, groups: g}
		return nil
	}
}

// rocketName checks a name given as it is against RocketMQ's resource
// name rule (^[%|a-zA-Z0-9_-]+$, at most MaxNameLength).
func rocketName(what, s string) error {
	if s == "" || len(s) > MaxNameLength || strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '|' || r == '%')
	}) >= 0 {
		return fmt.Errorf("%w: rocketmq %s %q must be 1..%d of letters, digits, '-', '_', '|', '%%'", ports.ErrInvalid, what, s, MaxNameLength)
	}
	return nil
}

// topicName is the RocketMQ topic of logical topic t: an adopted name, or
// the derived one. A scoped topic "tenant/namespace/name" is first
// flattened with ".." (Topic.Physical) and then mapped as every name is
// ('.' becomes '|'), giving "tenant||namespace||name": an unscoped
// topic never holds "..", so never "||", and tenant and namespace hold no
// '|', so the mapping stays one-to-one. A derived name that is an
// adopted topic's physical name is refused: two logical topics would
// share it.
func (a *Adapter) topicName(t ports.Topic) (string, error) {
	if e, ok := a.cfg.existing[t]; ok {
		return e.physical, nil
	}
	name, err := brokerName("topic", t.Physical(".."))
	if err != nil {
		return "", err
	}
	for other, e := range a.cfg.existing {
		if e.physical == name {
			return "", fmt.Errorf("%w: rocketmq topic %q of %q is the adopted topic of %q (WithExisting)", ports.ErrInvalid, name, t, other)
		}
	}
	return name, nil
}

// groupName is the consumer group of spec.
func (a *Adapter) groupName(spec ports.SubscriptionSpec) (string, error) {
	if e, ok := a.cfg.existing[spec.Topic]; ok && spec.Mode == ports.LoadBalance {
		if g := e.groups[spec.Group]; g != "" {
			return g, nil
		}
	}
	return brokerName("consumer group", groupFor(spec))
}

// checkSubscription refuses what the RocketMQ 5 client cannot do for spec
// and says at Subscribe that best effort travels at-least-once.
func (a *Adapter) checkSubscription(spec ports.SubscriptionSpec) error {
	if spec.Start == ports.StartEarliest {
		return fmt.Errorf("%w: the RocketMQ 5 SimpleConsumer has no consume-from-where: a new group starts where the broker's rules put it (StartEarliest)", ports.ErrUnsupported)
	}
	if spec.SingleActive {
		return fmt.Errorf("%w: a RocketMQ SimpleConsumer group spreads messages over every consumer; there is no single-active consumer (SingleActive)", ports.ErrUnsupported)
	}
	if spec.QoS == ports.BestEffort {
		a.cfg.logger.Warn("sluice rocketmq: best-effort (q0) subscription served at-least-once: RocketMQ has no weaker class; duplicates are possible, nothing is dropped",
			"topic", string(spec.Topic), "group", spec.Group)
	}
	return nil
}

// envelopeBytes is what a message stores besides its body.
func envelopeBytes(topic string, m *ports.Message) int {
	n := len(topic) + len(m.Key)
	for k, v := range m.Headers {
		n += len(k) + len(v) + 2 // RocketMQ's separators
	}
	return n
}

// DeclareTopic implements ports.TopicDeclarer. RocketMQ topics are an
// administrator's (mqadmin, the dashboard, or autoCreateTopicEnable), and
// the v5 client can set none of their properties: Retention
// (fileReservedTime is broker-wide) and MaxLength are refused with
// ErrUnsupported. Groups are declared as DeclareGroup does. The spec is
// recorded: a redeclaration with other properties fails with a
// *ports.RedeclareError.
func (a *Adapter) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if _, err := a.topicName(spec.Topic); err != nil {
		return err
	}
	switch {
	case spec.Retention > 0:
		return fmt.Errorf("%w: rocketmq cannot keep topic %q for %v: retention is the broker-wide fileReservedTime", ports.ErrUnsupported, spec.Topic, spec.Retention)
	case spec.MaxLength > 0:
		return fmt.Errorf("%w: rocketmq cannot cap topic %q at %d messages", ports.ErrUnsupported, spec.Topic, spec.MaxLength)
	}
	return a.declared.Declare(ctx, spec, kit.DeclareGroups(a))
}

// DeclareGroup implements ports.GroupDeclarer: it starts a SimpleConsumer
// of group on topic and stops it, which registers the group's
// subscription with the proxy, as a first consumer does. On rocketmqtest
// the group then exists at the topic's end and keeps what is published
// from then on. On Apache RocketMQ the group is created
// (autoCreateSubscriptionGroup) but a new group's position is fixed by the
// broker's consume-from-where rule at its first receive; create groups
// that must keep messages before their first consumer with the admin
// tools (mqadmin updateSubGroup). Not certified against Apache RocketMQ.
func (a *Adapter) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if a.isClosed() {
		return ports.ErrClosed
	}
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	name, err := a.topicName(topic)
	if err != nil {
		return err
	}
	g, err := a.groupName(spec)
	if err != nil {
		return err
	}
	sc, err := rmq.NewSimpleConsumer(a.cfg.clientConfig(g),
		rmq.WithSimpleAwaitDuration(a.cfg.await),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{name: rmq.SUB_ALL}))
	if err != nil {
		return fmt.Errorf("rocketmq: consumer for %s: %w", a.cfg.endpoint, err)
	}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.startTimeout)
	defer cancel()
	if err := start(sctx, sc, "consumer group "+g+" on topic "+name, a.cfg.endpoint); err != nil {
		return err
	}
	if err := sc.GracefulStop(); err != nil {
		return fmt.Errorf("rocketmq: declare group %s on %s: stop: %w", g, name, err)
	}
	return nil
}
