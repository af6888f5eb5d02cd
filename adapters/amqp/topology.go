package amqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// topology names and declares the adapter's exchanges and queues (the
// layout is in docs/adapters/amqp.md).
type topology struct {
	ns, topics, delayEx string
	queueType           QueueType
	granularity         float64
	slack               time.Duration
	existing            *Existing
	buckets             kit.Ensured[int64] // the delay queues (ms) declared lately
}

const (
	maxQueueName = 200
	// bucketRefresh is how old a delay queue's declaration may be before
	// it is declared again; its x-expires is its TTL plus twice this.
	bucketRefresh = 30 * time.Minute
)

func newTopology(o Options) *topology {
	return &topology{ns: o.Namespace, topics: o.Namespace + ".topics", delayEx: o.Namespace + ".delay", queueType: o.QueueType,
		granularity: o.DelayGranularity, slack: o.DelaySlack, existing: o.Existing,
		buckets: kit.Ensured[int64]{Refresh: bucketRefresh}}
}

// queueFor returns the physical queue of spec (defaults applied): a
// best-effort group has a queue of its own ("q0"), non-durable. A
// BROADCAST group and instance are escaped ('/' as "~1", JSON Pointer
// style), so that group "a/b" with instance "c" and group "a" with
// instance "b/c" name two queues.
func (t *topology) queueFor(spec ports.SubscriptionSpec) string {
	esc := func(s string) string { return kit.EscapeByte(s, '/', '~', '1') }
	switch {
	case spec.Mode == ports.Broadcast:
		return t.queue(spec.Topic, "bc", esc(spec.Group)+"/"+esc(spec.Instance))
	case spec.QoS == ports.BestEffort:
		return t.queue(spec.Topic, "q0", spec.Group)
	}
	return t.queue(spec.Topic, "lb", spec.Group)
}

// queue is "<ns>/<topic>/<kind>/<name>", shortened with a hash.
func (t *topology) queue(topic ports.Topic, kind, name string) string {
	return kit.ShortName(fmt.Sprintf("%s/%s/%s/%s", t.ns, topic.Physical(".."), kind, name), maxQueueName)
}

// target is the exchange and routing key of topic's messages.
func (t *topology) target(topic ports.Topic) (exch, key string) {
	if x, ok := t.existing.Topics[topic]; ok {
		return x.Exchange, x.RoutingKey
	}
	return t.topics, topic.Physical("..")
}

// queueArgs are the declaration arguments of a subscription queue.
func (t *topology) queueArgs(expires time.Duration) amqp.Table {
	args := amqp.Table{"x-queue-type": string(t.queueType)}
	if expires > 0 {
		args["x-expires"] = max(int64(expires/time.Millisecond), 1)
	}
	return args
}

// declareExchanges declares the two exchanges (idempotent).
func (t *topology) declareExchanges(ch *amqp.Channel) error {
	for name, kind := range map[string]string{t.topics: amqp.ExchangeDirect, t.delayEx: amqp.ExchangeHeaders} {
		if err := ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", name, err)
		}
	}
	return nil
}

// bucket is the delay queue (its TTL in ms) of a delay d: the first step
// of the grid at or above d+slack.
func (t *topology) bucket(d time.Duration) int64 { return kit.DelayStep(d+t.slack, t.granularity) }

// declareBucket declares the delay queue ms and binds it to the delay
// exchange; a quorum one dead-letters at-least-once.
func (t *topology) declareBucket(ch *amqp.Channel, ms int64) error {
	q := t.ns + ".delay." + strconv.FormatInt(ms, 10)
	args := amqp.Table{"x-queue-type": string(t.queueType), "x-message-ttl": ms, "x-dead-letter-exchange": t.topics,
		"x-expires": ms + int64(2*bucketRefresh/time.Millisecond)}
	if t.queueType == Quorum {
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare delay queue %q: %w", q, err)
	}
	match := amqp.Table{"x-match": "all", headerDelay: strconv.FormatInt(ms, 10)}
	if err := ch.QueueBind(q, "", t.delayEx, false, match); err != nil {
		return fmt.Errorf("bind delay queue %q: %w", q, err)
	}
	return nil
}

// Existing maps logical topics and groups onto exchanges and queues that
// exist already, used passively: New checks they exist, Send publishes to
// the adopted exchange and routing key, Subscribe consumes the adopted
// queue as it is. Message.Delay to an adopted topic is refused.
type Existing struct {
	// Topics maps a logical topic to the exchange and routing key its
	// messages are published with (map "<topic>.dlq" too to adopt its
	// dead-letter topic).
	Topics map[ports.Topic]ExistingTopic
	// Groups maps a LoadBalance group of a topic to the queue it consumes.
	Groups map[ExistingGroup]string
}

// ExistingTopic is an adopted exchange and the routing key to publish with.
type ExistingTopic struct {
	Exchange   string
	RoutingKey string
}

// ExistingGroup names a LoadBalance group of a logical topic.
type ExistingGroup = kit.ExistingGroup

// check verifies, passively, that every adopted exchange and queue exists.
func (e *Existing) check(ctx context.Context, c *connector) error {
	for t, x := range e.Topics {
		err := c.with(ctx, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(x.Exchange, "topic", true, false, false, false, nil)
		})
		if err = missing(err, "exchange %q for topic %q", x.Exchange, string(t)); err != nil {
			return err
		}
	}
	for g, q := range e.Groups {
		if err := missing(c.with(ctx, passive(q)), "queue %q for group %q of %q", q, g.Group, string(g.Topic)); err != nil {
			return err
		}
	}
	return nil
}

// missing says that an adopted name is missing, when the broker said so.
func missing(err error, format string, args ...any) error {
	if !errors.As(err, new(*amqp.Error)) {
		return err // nil, or no channel: not the broker's answer
	}
	return fmt.Errorf("amqp: Options.Existing names %s, which the broker does not have (sluice adopts existing names and never declares them): %w", fmt.Sprintf(format, args...), err)
}

// passive checks that queue q exists.
func passive(q string) func(*amqp.Channel) error {
	return func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		return err
	}
}
