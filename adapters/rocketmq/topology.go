package rocketmq

import (
	"context"
	"fmt"
	"strings"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/ports"
)

// MaxMessageBytes is the largest message Send accepts: Apache RocketMQ's
// default maxMessageSize (4 MiB), which the broker checks against the
// whole stored message, so the adapter counts the topic name, the keys
// and the user properties (sluice's headers) with the body. The proxy
// announces its own body limit to the client; a smaller one refuses a
// message the adapter let through with the proxy's error.
const MaxMessageBytes = 4 << 20

// nameRune reports whether RocketMQ allows r in a resource name.
func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '|' || r == '%'
}

// rocketName checks a name given as it is against RocketMQ's resource
// name rule (^[%|a-zA-Z0-9_-]+$, at most MaxNameLength).
func rocketName(what, s string) error {
	if s == "" || len(s) > MaxNameLength || strings.IndexFunc(s, func(r rune) bool { return !nameRune(r) }) >= 0 {
		return fmt.Errorf("%w: rocketmq %s %q must be 1..%d of letters, digits, '-', '_', '|', '%%'", ports.ErrInvalid, what, s, MaxNameLength)
	}
	return nil
}

// brokerName maps a sluice topic or group name to a RocketMQ resource name.
// RocketMQ allows letters, digits, '-', '_', '%' and '|'; sluice topics may
// also contain '.', which becomes '|' ('|' cannot occur in a sluice topic,
// so the mapping is reversible, and no RocketMQ system topic uses it).
func brokerName(what, s string) (string, error) {
	out := strings.ReplaceAll(s, ".", "|")
	if i := strings.IndexFunc(out, func(r rune) bool { return !nameRune(r) }); i >= 0 {
		return "", fmt.Errorf("%w: rocketmq %s %q has character %q at %d, which RocketMQ does not allow (letters, digits, '-', '_', '.')", ports.ErrInvalid, what, s, out[i], i)
	}
	if out == "" || len(out) > MaxNameLength {
		return "", fmt.Errorf("%w: rocketmq %s %q must be 1..%d characters", ports.ErrInvalid, what, s, MaxNameLength)
	}
	return out, nil
}

// topicName is the RocketMQ topic of logical topic t: an adopted name, or
// the derived one. A scoped topic "tenant/namespace/name" is first
// flattened with ".." (Topic.Physical) and then mapped as every name is
// ('.' becomes '|'), giving "tenant||namespace||name": an unscoped
// topic never holds "..", so never "||", and tenant and namespace hold no
// '|', so the mapping stays one-to-one. A derived name that is an
// adopted topic's physical name is refused: two logical topics would
// share it.
func (c *conn) topicName(t ports.Topic) (string, error) {
	if e, ok := c.existing[t]; ok {
		return e.As, nil
	}
	name, err := brokerName("topic", t.Physical(".."))
	if err != nil {
		return "", err
	}
	for other, e := range c.existing {
		if e.As == name {
			return "", fmt.Errorf("%w: rocketmq topic %q of %q is the adopted topic of %q (Options.Existing)", ports.ErrInvalid, name, t, other)
		}
	}
	return name, nil
}

// groupName is the consumer group of spec: an adopted LoadBalance group,
// the group itself, or for Broadcast a group of its own per instance,
// "<group>-<instance>".
func (c *conn) groupName(spec ports.SubscriptionSpec) (string, error) {
	if spec.Mode == ports.Broadcast {
		g := spec.Group
		if g == "" {
			g = "sluice-broadcast"
		}
		return brokerName("consumer group", g+"-"+spec.Instance)
	}
	if g := c.existing[spec.Topic].Groups[spec.Group]; g != "" {
		return g, nil
	}
	return brokerName("consumer group", spec.Group)
}

// envelopeBytes is what a message stores besides its body.
func envelopeBytes(topic string, m *ports.Message) int {
	n := len(topic) + len(m.Key)
	for _, h := range m.Headers {
		n += len(h.Name) + len(h.Value) + 2 // RocketMQ's separators
	}
	return n
}

// consumer starts a SimpleConsumer of group on topic.
func (c *conn) consumer(ctx context.Context, topic, group string) (rmq.SimpleConsumer, error) {
	sc, err := rmq.NewSimpleConsumer(c.clientConfig(group),
		rmq.WithSimpleAwaitDuration(c.o.AwaitDuration),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		return nil, fmt.Errorf("rocketmq: consumer for %s: %w", c.o.Endpoint, err)
	}
	sctx, cancel := context.WithTimeout(ctx, c.o.StartTimeout)
	defer cancel()
	return sc, start(sctx, sc, "consumer group "+group+" on topic "+topic, c.o.Endpoint)
}

// DeclareGroup implements driver.GroupDeclarer: it starts a SimpleConsumer
// of group on topic and stops it, which registers the group's
// subscription with the proxy, as a first consumer does. On rocketmqtest
// the group then exists at the topic's end and keeps what is published
// from then on. On Apache RocketMQ the group is created
// (autoCreateSubscriptionGroup) but a new group's position is fixed by the
// broker's consume-from-where rule at its first receive; create groups
// that must keep messages before their first consumer with the admin
// tools (mqadmin updateSubGroup). Not certified against Apache RocketMQ.
// The retention and length of a topic are the administrator's (RocketMQ's
// fileReservedTime is broker-wide): DeclareTopic refuses them.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	name, err := c.topicName(topic)
	if err != nil {
		return err
	}
	g, err := c.groupName(ports.SubscriptionSpec{Topic: topic, Group: group})
	if err != nil {
		return err
	}
	sc, err := c.consumer(ctx, name, g)
	if err != nil {
		return err
	}
	if err := sc.GracefulStop(); err != nil {
		return fmt.Errorf("rocketmq: declare group %s on %s: stop: %w", g, name, err)
	}
	return nil
}
