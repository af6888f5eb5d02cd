package amqp

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// DeclareTopic implements ports.TopicDeclarer. It records spec for this
// adapter (the subscription queues it declares later for the topic take
// spec's Retention as x-message-ttl and MaxLength as x-max-length) and
// declares the durable queue of each of spec.Groups with those arguments,
// bound to the topic, so that what is published from then on is kept for
// each group before its first consumer starts.
//
// A queue that exists with other arguments (another x-queue-type, another
// TTL or length, x-single-active-consumer) is left as it is: DeclareTopic
// fails with a *ports.RedeclareError naming each argument that differs
// (see redeclare.go for how they are found without changing the queue).
// Declaring the same spec again is a no-op; declaring the topic again with
// other properties on the same adapter fails with a *ports.RedeclareError
// before touching the broker. The groups of an adopted topic (see
// Options.Existing) are not declared: their queues exist already, and
// each is checked to have spec's Retention and MaxLength where spec sets
// them (verifyAdopted).
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	if spec.QoS == ports.BestEffort && len(spec.Groups) > 0 {
		return fmt.Errorf("%w: amqp: topic %q is best-effort: its groups' queues are non-durable and exist only while consumed, so they cannot be declared ahead (drop TopicSpec.Groups or use AtLeastOnce)", ports.ErrUnsupported, string(spec.Topic))
	}
	return c.declared.Declare(ctx, spec, c.createTopic)
}

// createTopic declares (or, for adopted groups, verifies) the queues of
// spec.Groups; kit.Declared records spec only when it succeeds.
func (c *conn) createTopic(ctx context.Context, spec ports.TopicSpec) error {
	if len(spec.Groups) == 0 {
		return nil
	}
	ch, err := c.pubC.channel(ctx)
	if err != nil {
		return err
	}
	defer func() { ch.Close() }()
	for _, g := range spec.Groups {
		if q, ok := c.existing.queue(spec.Topic, g); ok {
			if err := c.verifyAdopted(ctx, q, spec); err != nil {
				return fmt.Errorf("amqp: declare topic %q: group %q is adopted as queue %q: %w", string(spec.Topic), g, q, err)
			}
			continue
		}
		sh := queueShape{ttl: spec.Retention, maxLen: spec.MaxLength}
		if err := c.declareOn(ctx, c.pubC, &ch, c.topo.groupQueue(spec.Topic, g, sh), spec.Topic, false); err != nil {
			return fmt.Errorf("amqp: declare group %q of %s: %w", g, string(spec.Topic), err)
		}
	}
	return nil
}

// DeclareGroup implements ports.GroupDeclarer: it declares the durable
// queue of the LoadBalance group on topic and binds it, without starting a
// consumer, so messages sent from then on are kept for the group until its
// first consumer subscribes (Watermill's SubscribeInitialize). It is
// idempotent; the queue has the adapter's queue type, the topic's declared
// retention and length (DeclareTopic) and no expiry. A queue that exists
// with other arguments fails with a *ports.RedeclareError and is left as
// it is.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	if err := spec.Validate(); err != nil {
		return err
	}
	if _, ok := c.existing.queue(topic, group); ok {
		return nil // adopted: it exists, and it is not sluice's to declare
	}
	ch, err := c.pubC.channel(ctx)
	if err != nil {
		return err
	}
	defer func() { ch.Close() }()
	if err := c.declareOn(ctx, c.pubC, &ch, c.topo.groupQueue(topic, group, c.shape(topic, false, false)), topic, true); err != nil {
		return fmt.Errorf("amqp: declare group %q of %s: %w", group, topic, err)
	}
	return nil
}

// declareOn declares d on *ch, a channel of conn. When the queue exists
// with other arguments, tolerate is set, and the only differences are a
// TTL or length of a topic this adapter did not declare (another process
// declared it with DeclareTopic), the queue is used as it is: the last probe matched it, so
// nothing was changed. Any other difference (queue type, single-active,
// or a TTL or length other than this adapter declared) is a
// *ports.RedeclareError naming each one. *ch is replaced when a refusal
// closed it.
func (c *conn) declareOn(ctx context.Context, conn *connector, ch **amqp.Channel, d queueDecl, topic ports.Topic, tolerate bool) error {
	err := c.topo.declare(*ch, d)
	if err == nil || !isPrecondition(err) {
		return err
	}
	open := func() (*amqp.Channel, error) { return conn.channel(ctx) }
	diffs, matched := probe(open, d, err)
	nc, oerr := open()
	if oerr != nil {
		return oerr
	}
	(*ch).Close()
	*ch = nc
	_, declaredHere := c.declared.Lookup(topic)
	if tolerate && matched && !declaredHere && onlyTopicArgs(diffs) {
		c.opts.Logger.Info("sluice amqp: queue exists with the retention or length of a topic declared elsewhere; used as it is",
			"queue", d.name, "differences", diffTexts(diffs))
		for _, b := range d.binds { // the refused declaration bound nothing
			if err := nc.QueueBind(d.name, b[1], b[0], false, nil); err != nil {
				return fmt.Errorf("bind queue %q to exchange %q under %q: %w", d.name, b[0], b[1], err)
			}
		}
		return nil
	}
	texts := make([]string, len(diffs))
	for i, x := range diffs {
		texts[i] = x.text
	}
	return &ports.RedeclareError{Name: d.name, Diffs: texts}
}

// verifyAdopted checks that the adopted queue q exists and that its
// x-message-ttl and x-max-length are spec's Retention and MaxLength (where
// spec sets them), by the same probing as explainMismatch: the queue's
// other arguments (its type, dead-lettering, ...) are whatever they are
// and are not compared; nothing is changed. A difference is a
// *ports.RedeclareError.
func (c *conn) verifyAdopted(ctx context.Context, q string, spec ports.TopicSpec) error {
	ch, err := c.pubC.channel(ctx)
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
	ch.Close()
	if err != nil {
		return fmt.Errorf("it does not exist (sluice never declares an adopted queue): %w", err)
	}
	if spec.Retention == 0 && spec.MaxLength == 0 {
		return nil
	}
	d := queueDecl{name: q, durable: true, args: amqp.Table{}}
	if spec.Retention > 0 {
		d.args["x-message-ttl"] = max(int64(spec.Retention/time.Millisecond), 1)
	}
	if spec.MaxLength > 0 {
		d.args["x-max-length"] = int64(spec.MaxLength)
	}
	open := func() (*amqp.Channel, error) { return c.pubC.channel(ctx) }
	ch, err = open()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare(q, d.durable, false, false, false, d.args)
	ch.Close()
	if err == nil {
		return nil // it has exactly these arguments: a no-op declaration
	}
	if !isPrecondition(err) {
		return err
	}
	diffs, matched := probe(open, d, err)
	var texts []string
	for _, x := range diffs {
		if _, ours := d.args[x.key]; ours || x.key == "" {
			texts = append(texts, x.text)
		}
	}
	if len(texts) > 0 {
		return &ports.RedeclareError{Name: q, Diffs: texts}
	}
	if !matched {
		return fmt.Errorf("%w: its retention and length could not be verified (the broker's refusals named arguments sluice cannot express); check them by hand: %s", ports.ErrUnsupported, diffTexts(diffs))
	}
	return nil
}

func diffTexts(ds []argDiff) string {
	var b []byte
	for i, d := range ds {
		if i > 0 {
			b = append(b, "; "...)
		}
		b = append(b, d.text...)
	}
	return string(b)
}

// shape returns the queue arguments a subscription queue of topic gets:
// the declared topic's retention and length, and the flags asked for.
func (c *conn) shape(topic ports.Topic, singleActive, bestEffort bool) queueShape {
	spec, _ := c.declared.Lookup(topic)
	return queueShape{ttl: spec.Retention, maxLen: spec.MaxLength, singleActive: singleActive, bestEffort: bestEffort}
}

// queueShape is what decides a subscription queue's declaration.
type queueShape struct {
	expires      time.Duration // x-expires; 0: none
	ttl          time.Duration // x-message-ttl (TopicSpec.Retention); 0: none
	maxLen       int           // x-max-length (TopicSpec.MaxLength); 0: none
	singleActive bool          // x-single-active-consumer
	bestEffort   bool          // a non-durable classic queue
}

// queueDecl is one queue declaration: name, flags, arguments and the
// bindings on the namespace's exchange (or an adopted one).
type queueDecl struct {
	name    string
	durable bool
	args    amqp.Table
	// binds are (exchange, routing key) pairs the queue is bound under.
	binds [][2]string
}

// groupQueue is the declaration of the LoadBalance queue of group on
// topic with shape sh.
func (t *topology) groupQueue(topic ports.Topic, group string, sh queueShape) queueDecl {
	name := t.lbQueue(topic, group)
	if sh.bestEffort {
		name = t.shorten(fmt.Sprintf("%s/%s/q0/%s", t.ns, topic.Physical(".."), group))
	}
	return t.queueDecl(name, topic, sh)
}

// queueDecl is the declaration of the queue name for topic with shape sh.
func (t *topology) queueDecl(name string, topic ports.Topic, sh queueShape) queueDecl {
	args := t.queueArgs(sh.expires)
	if sh.bestEffort {
		args["x-queue-type"] = string(Classic)
	}
	if sh.ttl > 0 {
		args["x-message-ttl"] = max(int64(sh.ttl/time.Millisecond), 1)
	}
	if sh.maxLen > 0 {
		args["x-max-length"] = int64(sh.maxLen)
	}
	if sh.singleActive {
		args["x-single-active-consumer"] = true
	}
	exch, key := t.target(topic)
	d := queueDecl{name: name, durable: !sh.bestEffort, args: args, binds: [][2]string{{exch, key}}}
	d.binds = append(d.binds, [2]string{t.topics, route(name)})
	return d
}

// declare declares d and binds it.
func (t *topology) declare(ch *amqp.Channel, d queueDecl) error {
	if _, err := ch.QueueDeclare(d.name, d.durable, false, false, false, d.args); err != nil {
		return fmt.Errorf("declare queue %q: %w", d.name, err)
	}
	for _, b := range d.binds {
		if err := ch.QueueBind(d.name, b[1], b[0], false, nil); err != nil {
			return fmt.Errorf("bind queue %q to exchange %q under %q: %w", d.name, b[0], b[1], err)
		}
	}
	return nil
}

// onlyTopicArgs reports whether every difference is an argument that
// comes from a topic's declaration (x-message-ttl, x-max-length).
func onlyTopicArgs(diffs []argDiff) bool {
	for _, x := range diffs {
		if x.key != "x-message-ttl" && x.key != "x-max-length" {
			return false
		}
	}
	return len(diffs) > 0
}
