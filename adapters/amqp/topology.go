package amqp

import (
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

// topology names and declares the adapter's exchanges and queues.
//
//	<ns>.topics        direct exchange; routing key = logical topic, so every
//	                   queue bound with a topic's name gets a copy; each queue
//	                   is also bound under its own route "~<queue>" for
//	                   requeues addressed to it alone
//	<ns>.delay         headers exchange in front of the delay queues
//	<ns>.delay.<ms>    a delay queue: x-message-ttl <ms>, dead-letters into
//	                   <ns>.topics with the original routing key
//	<ns>/<topic>/lb/<group>              LOAD_BALANCE queue (durable, shared)
//	<ns>/<topic>/q0/<group>              best-effort LOAD_BALANCE queue
//	                                     (classic, non-durable)
//	<ns>/<topic>/bc/<group>/<instance>   BROADCAST queue (x-expires)
//
// <topic> is Topic.Physical(".."): a scoped "tenant/ns/name" is written
// "tenant..ns..name" in queue names and routing keys, so two tenants never
// share a queue or a routing key. Queue names longer than maxQueueName are
// shortened with a hash. Options.Existing replaces these names with
// adopted ones (existing.go).
type topology struct {
	ns          string
	topics      string
	delayEx     string
	queueType   QueueType
	orphan      time.Duration
	granularity float64
	slack       time.Duration
	existing    *Existing

	mu      sync.Mutex
	buckets map[int64]time.Time // delay queue ms -> when last declared
}

const (
	maxQueueName = 200
	// bucketRefresh is how old a delay queue's declaration may be before
	// it is declared again on use; its x-expires is its TTL plus twice this.
	bucketRefresh = 30 * time.Minute
)

func newTopology(o Options) *topology {
	return &topology{
		ns:          o.Namespace,
		topics:      o.Namespace + ".topics",
		delayEx:     o.Namespace + ".delay",
		queueType:   o.QueueType,
		orphan:      o.OrphanExpiry,
		granularity: o.DelayGranularity,
		slack:       o.DelaySlack,
		existing:    o.Existing,
		buckets:     map[int64]time.Time{},
	}
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

// declareQueue declares queue with args and binds it under topic and under
// its own route.
func (t *topology) declareQueue(ch *amqp.Channel, queue string, topic ports.Topic, args amqp.Table) error {
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %q: %w", queue, err)
	}
	if err := ch.QueueBind(queue, topic.Physical(".."), t.topics, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to topic %q: %w", queue, topic, err)
	}
	if err := ch.QueueBind(queue, route(queue), t.topics, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to its route: %w", queue, err)
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
	if float64(b) < ms { // guard against floating error
		b = int64(math.Ceil(ms))
	}
	return b
}

func (t *topology) bucketQueue(ms int64) string {
	return t.ns + ".delay." + strconv.FormatInt(ms, 10)
}

// needBucket reports whether the delay queue ms must be declared (never
// declared, or declared longer than bucketRefresh ago).
func (t *topology) needBucket(ms int64, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.buckets[ms]
	return !ok || now.Sub(at) > bucketRefresh
}

// forgetBucket drops the memory of a declaration (after a publish into it
// came back unroutable, e.g. because it expired).
func (t *topology) forgetBucket(ms int64) {
	t.mu.Lock()
	delete(t.buckets, ms)
	t.mu.Unlock()
}

// declareBucket declares the delay queue ms and binds it to the delay
// exchange. On quorum queues it dead-letters at-least-once, so a message is
// removed from the delay queue only after its target queue confirmed it.
func (t *topology) declareBucket(ch *amqp.Channel, ms int64, now time.Time) error {
	q := t.bucketQueue(ms)
	args := amqp.Table{
		"x-queue-type":           string(t.queueType),
		"x-message-ttl":          ms,
		"x-dead-letter-exchange": t.topics,
		"x-expires":              ms + int64(2*bucketRefresh/time.Millisecond),
	}
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
