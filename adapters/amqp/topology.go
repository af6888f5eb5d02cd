package amqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// topology names and declares the adapter's exchanges and queues (the
// layout is in docs/adapters/amqp.md).
type topology struct {
	Options
	topics, delayEx string
	buckets         kit.Ensured[int64] // the delay queues (ms) declared lately
}

const (
	maxQueueName = 200
	// bucketRefresh is how old a delay queue's declaration may be before
	// it is declared again; its x-expires is its TTL plus twice this.
	bucketRefresh = 30 * time.Minute
)

func newTopology(o Options) *topology {
	return &topology{Options: o, topics: o.Namespace + ".topics", delayEx: o.Namespace + ".delay", buckets: kit.Ensured[int64]{Refresh: bucketRefresh}}
}

// queueFor returns the physical queue of spec: a best-effort group has a
// non-durable one of its own ("q0"); a BROADCAST group and instance are
// escaped ('/' as "~1"), so that "a/b" with "c" and "a" with "b/c" differ.
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
	return kit.ShortName(fmt.Sprintf("%s/%s/%s/%s", t.Namespace, topic.Physical(".."), kind, name), maxQueueName)
}

// target is the exchange and routing key of topic's messages.
func (t *topology) target(topic ports.Topic) (exch, key string) {
	if x, ok := t.Existing.Topics[topic]; ok {
		return x.Exchange, x.RoutingKey
	}
	return t.topics, topic.Physical("..")
}

// queueArgs are the declaration arguments of a subscription queue.
func (t *topology) queueArgs(expires time.Duration) amqp.Table {
	args := amqp.Table{"x-queue-type": string(t.QueueType)}
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

// bucket is the delay queue (its TTL in ms) of d: the first grid step at
// or above d+slack.
func (t *topology) bucket(d time.Duration) int64 {
	return kit.DelayStep(d+t.DelaySlack, t.DelayGranularity)
}

// declareBucket declares the delay queue ms and binds it to the delay
// exchange; a quorum one dead-letters at-least-once.
func (t *topology) declareBucket(ch *amqp.Channel, ms int64) error {
	q := t.Namespace + ".delay." + strconv.FormatInt(ms, 10)
	args := amqp.Table{"x-queue-type": string(t.QueueType), "x-message-ttl": ms, "x-dead-letter-exchange": t.topics,
		"x-expires": ms + int64(2*bucketRefresh/time.Millisecond)}
	if t.QueueType == Quorum {
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

// Existing adopts exchanges and queues as they are: New checks they exist,
// Send publishes to the exchange and key, Subscribe consumes the queue.
type Existing struct {
	// Topics maps a logical topic (and "<topic>.dlq" for its dead
	// letters) to the exchange and routing key its messages go to.
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
func (e *Existing) check(ctx context.Context, c *connector) (err error) {
	for t, x := range e.Topics {
		err = cmp.Or(err, missing(c.with(ctx, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(x.Exchange, "topic", true, false, false, false, nil)
		}), "exchange %q for topic %q", x.Exchange, string(t)))
	}
	for g, q := range e.Groups {
		err = cmp.Or(err, missing(c.with(ctx, passive(q)), "queue %q for group %q of %q", q, g.Group, string(g.Topic)))
	}
	return err
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

// DeclareTopic records spec (its group queues get Retention as
// x-message-ttl, MaxLength as x-max-length) and declares spec.Groups'
// queues; one that exists with other arguments is left as it is, with a
// *ports.RedeclareError. An adopted group's queue is checked to exist.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	if spec.QoS == ports.BestEffort && len(spec.Groups) > 0 {
		return fmt.Errorf("%w: amqp: topic %q is best-effort: its groups' queues are non-durable and exist only while consumed, so they cannot be declared ahead (drop TopicSpec.Groups or use AtLeastOnce)", ports.ErrUnsupported, string(spec.Topic))
	}
	return c.declared.Declare(ctx, spec, func(ctx context.Context, spec ports.TopicSpec) error {
		for _, g := range spec.Groups {
			if err := c.declareGroup(ctx, spec.Topic, g, queueShape{ttl: spec.Retention, maxLen: spec.MaxLength}, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeclareGroup declares and binds the durable queue of the LoadBalance
// group, so messages sent from then on are kept for it.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	return c.declareGroup(ctx, topic, group, c.shape(ports.SubscriptionSpec{Topic: topic}), true)
}

// declareGroup declares group's queue with shape sh (tolerate: as
// declare), or checks that the adopted queue exists.
func (c *conn) declareGroup(ctx context.Context, topic ports.Topic, group string, sh queueShape, tolerate bool) error {
	var err error
	if q, ok := c.opts.Existing.Groups[ExistingGroup{Topic: topic, Group: group}]; ok {
		err = missing(c.pubC.with(ctx, passive(q)), "queue %q", q)
	} else {
		err = c.declare(ctx, c.pubC, c.topo.queueDecl(c.topo.queue(topic, "lb", group), topic, sh), topic, tolerate)
	}
	if err != nil {
		return fmt.Errorf("amqp: declare group %q of %s: %w", group, string(topic), err)
	}
	return nil
}

// inequivalent reads the refusal (PRECONDITION_FAILED) of a declaration
// whose arguments differ from the queue's, naming the first, e.g.
// "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received
// none but current is the value '60000' of type 'long'".
var inequivalent = regexp.MustCompile(`inequivalent arg '(.+?)' for .*?: received (none|the value '.*?' of type '\w+'|'.*?') but current is (none|the value '(.*)' of type '\w+'|'(.*)')$`)

// declare declares d on a channel of conn. A queue that exists with other
// arguments is a *ports.RedeclareError naming the first, unless tolerate
// is set and they are only the TTL or length of a topic another process
// declared: declared again with those (a no-op), the queue is used as it is.
func (c *conn) declare(ctx context.Context, conn *connector, d queueDecl, topic ports.Topic, tolerate bool) error {
	err := conn.with(ctx, d.declare)
	_, declaredHere := c.declared.Lookup(topic)
	args, seen := maps.Clone(d.args), []string(nil)
	for range 3 { // the TTL, the length, then the first other difference
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			break
		}
		m := inequivalent.FindStringSubmatch(ae.Reason)
		if m == nil {
			return &ports.RedeclareError{Name: d.name, Diffs: []string{ae.Reason}}
		}
		seen = append(seen, fmt.Sprintf("%s: existing %s, declared %s", m[1], m[3], m[2]))
		n, perr := strconv.ParseInt(m[4]+m[5], 10, 64)
		if !tolerate || declaredHere || m[1] != "x-message-ttl" && m[1] != "x-max-length" || perr != nil && m[3] != "none" {
			return &ports.RedeclareError{Name: d.name, Diffs: seen}
		}
		args[m[1]] = n
		if m[3] == "none" {
			delete(args, m[1])
		}
		err = conn.with(ctx, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(d.name, d.durable, false, false, false, args)
			return err
		})
		if err == nil {
			c.opts.Logger.Info("sluice amqp: queue exists with the retention or length of a topic declared elsewhere; used as it is",
				"queue", d.name, "differences", strings.Join(seen, "; "))
			return conn.with(ctx, d.bind) // the refused declaration bound nothing
		}
	}
	return err
}

// shape returns the shape of spec's queue (with its topic's declaration).
func (c *conn) shape(spec ports.SubscriptionSpec) queueShape {
	t, _ := c.declared.Lookup(spec.Topic)
	sh := queueShape{ttl: t.Retention, maxLen: t.MaxLength, singleActive: spec.SingleActive, bestEffort: spec.QoS == ports.BestEffort}
	if spec.Mode == ports.Broadcast {
		sh.expires = cmp.Or(spec.InstanceTTL, c.opts.OrphanExpiry)
	}
	return sh
}

// queueShape is what decides a subscription queue's declaration.
type queueShape struct {
	expires      time.Duration // x-expires; 0: none
	ttl          time.Duration // x-message-ttl (TopicSpec.Retention)
	maxLen       int           // x-max-length (TopicSpec.MaxLength)
	singleActive bool          // x-single-active-consumer
	bestEffort   bool          // a non-durable classic queue
}

// queueDecl is one queue declaration and its (exchange, key) bindings.
type queueDecl struct {
	name    string
	durable bool
	args    amqp.Table
	binds   [][2]string
}

// queueDecl declares queue name for topic with shape sh.
func (t *topology) queueDecl(name string, topic ports.Topic, sh queueShape) queueDecl {
	args := t.queueArgs(sh.expires)
	if sh.ttl > 0 {
		args["x-message-ttl"] = max(int64(sh.ttl/time.Millisecond), 1)
	}
	if sh.maxLen > 0 {
		args["x-max-length"] = int64(sh.maxLen)
	}
	if sh.bestEffort {
		args["x-queue-type"] = string(Classic)
	}
	if sh.singleActive {
		args["x-single-active-consumer"] = true
	}
	exch, key := t.target(topic)
	return queueDecl{name: name, durable: !sh.bestEffort, args: args, binds: [][2]string{{exch, key}}}
}

// declare declares d and binds it.
func (d queueDecl) declare(ch *amqp.Channel) error {
	if _, err := ch.QueueDeclare(d.name, d.durable, false, false, false, d.args); err != nil {
		return fmt.Errorf("declare queue %q: %w", d.name, err)
	}
	return d.bind(ch)
}

func (d queueDecl) bind(ch *amqp.Channel) error {
	for _, b := range d.binds {
		if err := ch.QueueBind(d.name, b[1], b[0], false, nil); err != nil {
			return fmt.Errorf("bind queue %q to exchange %q under %q: %w", d.name, b[0], b[1], err)
		}
	}
	return nil
}
