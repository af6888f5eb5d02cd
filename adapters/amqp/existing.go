package amqp

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// Existing maps logical topics and groups onto a topology that exists
// already, so that a service written against hand-made RabbitMQ names
// moves to sluice without renaming or redeclaring anything. Adopted
// exchanges and queues are only ever used passively: New checks that they
// exist (queue.declare and exchange.declare with passive set), Send
// publishes to the adopted exchange under the adopted routing key, and
// Subscribe consumes the adopted queue as it is — its type, TTL, length
// and dead-lettering arguments stay whatever they were declared with.
//
// The one thing sluice may add to an adopted queue is a binding from its
// own namespace exchange ("<ns>.topics", routing key "~<queue>"), made on
// the first requeue with a delay (backoff), which carries delayed requeues
// back to it; it changes no argument and nothing published by other
// programs reaches it. Message.Delay is refused for
// adopted topics (the delay queues dead-letter into the namespace
// exchange, not into an adopted one).
type Existing struct {
	// Topics maps a logical topic to the exchange and routing key its
	// messages are published with (e.g. "billing.invoices" →
	// {"dc3.e.billing", "dc3.r.billing.invoices"}). Subscriptions of the
	// topic that are not adopted groups bind their own queues to that
	// exchange under that key. To adopt a topic's dead-letter topic, map
	// "<topic>.dlq" too; otherwise dead letters go to a sluice queue in
	// the namespace.
	Topics map[ports.Topic]ExistingTopic
	// Groups maps a LoadBalance group of a topic to the queue it consumes
	// (e.g. {"billing.invoices", "mailer"} → "dc3.q.billing.mailer").
	Groups map[ExistingGroup]string
}

// ExistingTopic is an adopted exchange and the routing key to publish with.
type ExistingTopic struct {
	Exchange   string
	RoutingKey string
}

// ExistingGroup names a LoadBalance group of a logical topic.
type ExistingGroup struct {
	Topic ports.Topic
	Group string
}

func (e *Existing) topic(t ports.Topic) (ExistingTopic, bool) {
	if e == nil {
		return ExistingTopic{}, false
	}
	x, ok := e.Topics[t]
	return x, ok
}

func (e *Existing) queue(t ports.Topic, group string) (string, bool) {
	if e == nil {
		return "", false
	}
	q, ok := e.Groups[ExistingGroup{Topic: t, Group: group}]
	return q, ok
}

// validate reports a malformed mapping (as ports.ErrInvalid).
func (e *Existing) validate() error {
	if e == nil {
		return nil
	}
	for t, x := range e.Topics {
		if err := t.Validate(); err != nil {
			return &ports.ValueError{Field: "amqp.Options.Existing.Topics", Reason: err.Error()}
		}
		if x.Exchange == "" {
			return &ports.ValueError{Field: "amqp.Options.Existing.Topics", Reason: fmt.Sprintf("topic %q has no exchange (the default exchange cannot be adopted; name the exchange the topic is published to)", string(t))}
		}
	}
	for g, q := range e.Groups {
		if err := g.Topic.Validate(); err != nil || g.Group == "" || q == "" {
			return &ports.ValueError{Field: "amqp.Options.Existing.Groups", Reason: fmt.Sprintf("%q/%q → %q needs a valid topic, a group and a queue", string(g.Topic), g.Group, q)}
		}
	}
	return nil
}

// check verifies, passively, that every adopted exchange and queue exists.
// A check that fails closes the channel, so each gets a fresh one.
func (e *Existing) check(ctx context.Context, open func(context.Context) (*amqp.Channel, error)) error {
	if e == nil {
		return nil
	}
	try := func(what string, f func(ch *amqp.Channel) error) error {
		ch, err := open(ctx)
		if err != nil {
			return err
		}
		defer ch.Close()
		if err := f(ch); err != nil {
			return fmt.Errorf("amqp: Options.Existing names %s, which the broker does not have (sluice adopts existing names and never declares them): %w", what, err)
		}
		return nil
	}
	for t, x := range e.Topics {
		if err := try(fmt.Sprintf("exchange %q for topic %q", x.Exchange, string(t)), func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(x.Exchange, "topic", true, false, false, false, nil)
		}); err != nil {
			return err
		}
	}
	for g, q := range e.Groups {
		if err := try(fmt.Sprintf("queue %q for group %q of %q", q, g.Group, string(g.Topic)), func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// target is the exchange and routing key messages of topic are published
// with: an adopted pair, or the namespace exchange under the topic's flat
// name (Topic.Physical(".."): a scoped "tenant/ns/name" becomes
// "tenant..ns..name", one-to-one since ".." is reserved).
func (t *topology) target(topic ports.Topic) (exch, key string) {
	if x, ok := t.existing.topic(topic); ok {
		return x.Exchange, x.RoutingKey
	}
	return t.topics, topic.Physical("..")
}

// bindRequeueRoute binds an adopted queue under its requeue route on the
// namespace exchange before its first delayed requeue (the delay queues
// dead-letter into that exchange). Queues sluice declares are bound at
// declaration; an adopted one only when a delayed requeue needs it, so
// that an adopted topology gains no binding otherwise.
func (s *sub) bindRequeueRoute(ctx context.Context, delay time.Duration) error {
	if !s.adopted || delay <= 0 || s.routeBound.Load() {
		return nil
	}
	ch, err := s.c.subC.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.QueueBind(s.queue, route(s.queue), s.c.topo.topics, false, nil); err != nil {
		return fmt.Errorf("bind adopted queue %q to its requeue route on %q: %w", s.queue, s.c.topo.topics, err)
	}
	s.routeBound.Store(true)
	return nil
}
