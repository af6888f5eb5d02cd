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

	"github.com/sluicemq/sluice/ports"
)

// DeclareTopic records spec (the group queues declared later for the
// topic get its Retention as x-message-ttl and MaxLength as x-max-length)
// and declares each of spec.Groups' durable queue, bound to the topic. A
// queue that exists with other arguments is left as it is: a
// *ports.RedeclareError names each argument that differs. An adopted
// group's queue is checked to exist with spec's retention and length.
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
// group without a consumer, so messages sent from then on are kept for it
// (Watermill's SubscribeInitialize), with the topic's declared retention
// and length; an adopted queue is left alone.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	return c.declareGroup(ctx, topic, group, c.shape(ports.SubscriptionSpec{Topic: topic}), true)
}

// declareGroup declares group's queue with shape sh (tolerate: as
// declare). An adopted queue is verified by DeclareTopic (not tolerate)
// and left alone by DeclareGroup.
func (c *conn) declareGroup(ctx context.Context, topic ports.Topic, group string, sh queueShape, tolerate bool) error {
	var err error
	if q, ok := c.opts.Existing.Groups[ExistingGroup{Topic: topic, Group: group}]; !ok {
		err = c.declare(ctx, c.pubC, c.topo.queueDecl(c.topo.queue(topic, "lb", group), topic, sh), topic, tolerate)
	} else if !tolerate {
		err = c.verifyAdopted(ctx, q, sh)
	}
	if err != nil {
		return fmt.Errorf("amqp: declare group %q of %s: %w", group, string(topic), err)
	}
	return nil
}

// verifyAdopted checks that the adopted queue q exists and that its
// x-message-ttl and x-max-length are sh's where sh sets them (its other
// arguments are not compared); nothing is changed. A difference is a
// *ports.RedeclareError.
func (c *conn) verifyAdopted(ctx context.Context, q string, sh queueShape) error {
	d := queueDecl{name: q, durable: true, args: limits(amqp.Table{}, sh)}
	if len(d.args) == 0 {
		d.args = nil // check that it exists, nothing more
	}
	diffs, matched, err := differences(ctx, c.pubC, d, true)
	if err != nil {
		return fmt.Errorf("adopted queue %q does not exist or cannot be checked (sluice never declares an adopted queue): %w", q, err)
	}
	var texts, all []string
	for _, x := range diffs {
		if _, ours := d.args[x.key]; ours || x.key == "" {
			texts = append(texts, x.text)
		}
		all = append(all, x.text)
	}
	if len(texts) > 0 {
		return &ports.RedeclareError{Name: q, Diffs: texts}
	}
	if !matched {
		return fmt.Errorf("%w: adopted queue %q: its retention and length could not be verified (the broker's refusals named arguments sluice cannot express); check them by hand: %s", ports.ErrUnsupported, q, strings.Join(all, "; "))
	}
	return nil
}

// declare declares d on a channel of conn. A queue that exists with other
// arguments is a *ports.RedeclareError naming each, unless tolerate is set
// and they are only the TTL or length of a topic another process declared:
// then the queue is used as it is.
func (c *conn) declare(ctx context.Context, conn *connector, d queueDecl, topic ports.Topic, tolerate bool) error {
	diffs, matched, err := differences(ctx, conn, d, false)
	if err != nil || len(diffs) == 0 {
		return err
	}
	_, declaredHere := c.declared.Lookup(topic)
	onlyTopic := true
	texts := make([]string, len(diffs))
	for i, x := range diffs {
		texts[i] = x.text
		onlyTopic = onlyTopic && (x.key == "x-message-ttl" || x.key == "x-max-length")
	}
	if !tolerate || !matched || declaredHere || !onlyTopic {
		return &ports.RedeclareError{Name: d.name, Diffs: texts}
	}
	c.opts.Logger.Info("sluice amqp: queue exists with the retention or length of a topic declared elsewhere; used as it is",
		"queue", d.name, "differences", strings.Join(texts, "; "))
	return conn.with(ctx, d.bind) // the refused declaration bound nothing
}

// shape returns the queue arguments of spec's queue: its topic's declared
// retention and length, and what spec asks for.
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

// queueDecl is one queue declaration and its bindings, (exchange, routing
// key) pairs.
type queueDecl struct {
	name    string
	durable bool
	args    amqp.Table
	binds   [][2]string
}

// queueDecl is the declaration of queue name for topic with shape sh,
// bound under the topic.
func (t *topology) queueDecl(name string, topic ports.Topic, sh queueShape) queueDecl {
	args := limits(t.queueArgs(sh.expires), sh)
	if sh.bestEffort {
		args["x-queue-type"] = string(Classic)
	}
	if sh.singleActive {
		args["x-single-active-consumer"] = true
	}
	exch, key := t.target(topic)
	return queueDecl{name: name, durable: !sh.bestEffort, args: args, binds: [][2]string{{exch, key}}}
}

// limits sets sh's retention and length in args and returns args.
func limits(args amqp.Table, sh queueShape) amqp.Table {
	if sh.ttl > 0 {
		args["x-message-ttl"] = max(int64(sh.ttl/time.Millisecond), 1)
	}
	if sh.maxLen > 0 {
		args["x-max-length"] = int64(sh.maxLen)
	}
	return args
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

// A queue.declare with other arguments than the queue's is refused
// (PRECONDITION_FAILED, the channel closed) naming the first that differs:
//
//	inequivalent arg 'x-queue-type' for queue 'q' in vhost '/':
//	received 'classic' but current is 'quorum'
//
// AMQP cannot read a queue's arguments, so differences learns them from
// these refusals, declaring again with the existing value of each named
// argument (at most maxProbes times). Each probe is refused or matches the
// queue (a no-op): the queue is never redeclared with other arguments.
const maxProbes = 12

var inequivalent = regexp.MustCompile(`inequivalent arg '(.+?)' for .*?: received (none|the value '.*?' of type '\w+'|'.*?') but current is (none|the value '(.*)' of type '(\w+)'|'(.*)')$`)

// argDiff is one argument in which a declaration differs from the queue.
type argDiff struct {
	key  string // "" when the refusal could not be read
	text string // "key: existing X, declared Y"
	cur  string // the existing value ("" for none)
}

// differences declares d on a channel of conn (after a passive check that
// the queue exists, when passive; only that when d.args is nil) and, when
// the broker refuses it, probes for each argument in which the queue
// differs; matched: the last declaration matched the queue, so diffs is
// complete. err is the first declaration's, unless it was a refusal.
func differences(ctx context.Context, conn *connector, d queueDecl, passive bool) (diffs []argDiff, matched bool, err error) {
	err = conn.with(ctx, func(ch *amqp.Channel) error {
		if passive { // first: a declaration would create a deleted queue
			if _, err := ch.QueueDeclarePassive(d.name, true, false, false, false, nil); err != nil || d.args == nil {
				return err
			}
		}
		return d.declare(ch)
	})
	args, durable := amqp.Table{}, d.durable
	maps.Copy(args, d.args)
	for i := 0; i < maxProbes && err != nil; i++ {
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			if i == 0 {
				return nil, false, err
			}
			return diffs, false, nil
		}
		m := inequivalent.FindStringSubmatch(ae.Reason)
		if m == nil {
			return append(diffs, argDiff{text: ae.Reason}), false, nil
		}
		key := m[1]
		diffs = append(diffs, argDiff{key: key, text: fmt.Sprintf("%s: existing %s, declared %s", key, m[3], m[2]), cur: m[4] + m[6]})
		if key == "durable" {
			durable = !durable
		} else if !adoptValue(args, key, m) {
			return diffs, false, nil
		}
		err = conn.with(ctx, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(d.name, durable, false, false, false, args)
			return err
		})
	}
	return diffs, err == nil, nil
}

// adoptValue sets args[key] to the existing value in match m (removes it
// for none), typed like the declared value; false when it cannot.
func adoptValue(args amqp.Table, key string, m []string) bool {
	if m[3] == "none" {
		delete(args, key)
		return true
	}
	raw, typ := m[4]+m[6], m[5]
	if typ == "" {
		switch args[key].(type) {
		case string:
			typ = "longstr"
		case bool:
			typ = "bool"
		}
	}
	var err error
	switch typ {
	case "longstr":
		args[key] = raw
	case "bool":
		args[key], err = strconv.ParseBool(raw)
	default:
		args[key], err = strconv.ParseInt(raw, 10, 64)
	}
	return err == nil
}

// queueType learns the type of the existing queue q (an adopted one) from
// a durable quorum declaration, refused with the type it has.
func (c *conn) queueType(ctx context.Context, q string) string {
	diffs, matched, err := differences(ctx, c.pubC, queueDecl{name: q, durable: true, args: amqp.Table{"x-queue-type": string(Quorum)}}, true)
	for _, x := range diffs {
		if x.key == "x-queue-type" {
			return cmp.Or(x.cur, string(Classic)) // declared without a type: the default
		}
	}
	if matched && err == nil {
		return string(Quorum)
	}
	return "unknown"
}
