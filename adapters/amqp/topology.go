package amqp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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

	mu      sync.Mutex
	buckets map[int64]time.Time // delay queue ms -> when last declared
}

const (
	maxQueueName = 200
	// bucketRefresh is how old a delay queue's declaration may be before
	// it is declared again; its x-expires is its TTL plus twice this.
	bucketRefresh = 30 * time.Minute
)

func newTopology(o Options) *topology {
	return &topology{ns: o.Namespace, topics: o.Namespace + ".topics", delayEx: o.Namespace + ".delay", queueType: o.QueueType,
		granularity: o.DelayGranularity, slack: o.DelaySlack, existing: o.Existing, buckets: map[int64]time.Time{}}
}

// queueFor returns the physical queue of spec (defaults applied).
func (t *topology) queueFor(spec ports.SubscriptionSpec) string {
	if spec.Mode == ports.Broadcast {
		return t.shorten(fmt.Sprintf("%s/%s/bc/%s/%s", t.ns, spec.Topic.Physical(".."), spec.Group, spec.Instance))
	}
	return t.lbQueue(spec.Topic, spec.Group)
}

func (t *topology) lbQueue(topic ports.Topic, group string) string {
	return t.shorten(fmt.Sprintf("%s/%s/lb/%s", t.ns, topic.Physical(".."), group))
}

func (t *topology) shorten(name string) string {
	if len(name) <= maxQueueName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxQueueName-33] + "#" + hex.EncodeToString(sum[:16])
}

// route is the routing key on <ns>.topics that reaches queue alone.
func route(queue string) string { return "~" + queue }

// target is the exchange and routing key of topic's messages.
func (t *topology) target(topic ports.Topic) (exch, key string) {
	if x, ok := t.existing.topic(topic); ok {
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
	if err := ch.ExchangeDeclare(t.topics, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.topics, err)
	}
	if err := ch.ExchangeDeclare(t.delayEx, amqp.ExchangeHeaders, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.delayEx, err)
	}
	return nil
}

// bucket rounds a delay up to its delay queue, in milliseconds: the first
// step of the geometric grid (1+granularity)^k ms at or above d+slack.
func (t *topology) bucket(d time.Duration) int64 {
	ms := float64(d+t.slack) / float64(time.Millisecond)
	if ms <= 1 {
		return 1
	}
	k := math.Ceil(math.Log(ms) / math.Log1p(t.granularity))
	b := int64(math.Ceil(math.Pow(1+t.granularity, k)))
	return max(b, int64(math.Ceil(ms))) // guard against floating error
}

// needBucket reports whether the delay queue ms must be declared.
func (t *topology) needBucket(ms int64, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.buckets[ms]
	return !ok || now.Sub(at) > bucketRefresh
}

// forgetBucket drops a declaration (a publish into it was unroutable).
func (t *topology) forgetBucket(ms int64) {
	t.mu.Lock()
	delete(t.buckets, ms)
	t.mu.Unlock()
}

// declareBucket declares the delay queue ms and binds it to the delay
// exchange; a quorum one dead-letters at-least-once.
func (t *topology) declareBucket(ch *amqp.Channel, ms int64, now time.Time) error {
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
	t.mu.Lock()
	t.buckets[ms] = now
	t.mu.Unlock()
	return nil
}

// Existing maps logical topics and groups onto exchanges and queues that
// exist already, used passively: New checks they exist, Send publishes to
// the adopted exchange and routing key, Subscribe consumes the adopted
// queue as it is. sluice only adds a binding "~<queue>" from
// "<ns>.topics" on the first delayed requeue; Message.Delay to an adopted
// topic is refused.
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
