package activemq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// MaxMessageBytes is the largest payload Send accepts: the adapter's own
// bound, below ActiveMQ's STOMP limit (100 MiB) and the memory limits that
// would block a producer on flow control. Headers are not counted.
const MaxMessageBytes = 16 << 20

// Existing adopts ActiveMQ destinations that other programs already use for
// one logical topic (Options.Existing), so a service moving to sluice
// keeps every name byte for byte. Nothing is created or redeclared for an
// adopted topic: ActiveMQ creates destinations on use.
type Existing struct {
	// Topic is the logical topic.
	Topic ports.Topic
	// Destination is where Send publishes Topic's messages, used as it is:
	// "/topic/VirtualTopic.<name>" (a virtual topic, whose groups consume
	// "/queue/Consumer.<group>.VirtualTopic.<name>" unless Queues names
	// another queue, and which supports Broadcast), "/topic/<name>" (every
	// group must be in Queues) or "/queue/<name>" (one queue: a group not
	// in Queues consumes it, and every such group competes for it).
	Destination string
	// Queues maps a LoadBalance group to the queue ("/queue/<name>") it
	// consumes.
	Queues map[string]string
}

const virtualTopicPrefix = "/topic/VirtualTopic."

func validateExisting(ex []Existing) error {
	seen := map[ports.Topic]bool{}
	for i, e := range ex {
		bad := kit.Invalid(fmt.Sprintf("activemq.Options.Existing[%d].", i))
		switch {
		case e.Topic.Validate() != nil:
			return bad("Topic", "%v", e.Topic.Validate())
		case isDeadLetterTopic(e.Topic):
			return bad("Topic", "%q is a dead-letter topic: adopt its topic, whose dead letters go to the adapter's own queue", e.Topic)
		case seen[e.Topic]:
			return bad("Topic", "%q is adopted twice", e.Topic)
		case !validDest(e.Destination, "/topic/", "/queue/"):
			return bad("Destination", "%q must be /topic/<name> or /queue/<name>", e.Destination)
		}
		seen[e.Topic] = true
		for g, q := range e.Queues {
			if g == "" || !validDest(q, "/queue/") {
				return bad("Queues", "group %q: %q must be /queue/<name>", g, q)
			}
		}
	}
	return nil
}

func validDest(d string, prefixes ...string) bool {
	for _, p := range prefixes {
		if name, ok := strings.CutPrefix(d, p); ok && name != "" && !strings.ContainsAny(name, "*>\n\r\x00") {
			return true
		}
	}
	return false
}

func (d *conn) adopted(t ports.Topic) (Existing, bool) {
	for _, e := range d.opts.Existing {
		if e.Topic == t {
			return e, true
		}
	}
	return Existing{}, false
}

// adoptedQueue is the queue spec consumes on an adopted topic.
func adoptedQueue(e Existing, spec ports.SubscriptionSpec) (string, error) {
	if spec.Mode == ports.LoadBalance {
		if q := e.Queues[spec.Group]; q != "" {
			return q, nil
		}
	}
	if name, ok := strings.CutPrefix(e.Destination, virtualTopicPrefix); ok {
		return consumerQueue(spec, "VirtualTopic."+name), nil
	}
	if strings.HasPrefix(e.Destination, "/queue/") && spec.Mode == ports.LoadBalance {
		return e.Destination, nil
	}
	return "", fmt.Errorf("%w: %v subscription of group %q to the adopted topic %q (%s): name its queue in Existing.Queues (only a virtual topic gets per-group and per-instance queues of its own)", ports.ErrUnsupported, spec.Mode, spec.Group, spec.Topic, e.Destination)
}

// scopedPhysical maps "tenant/namespace/name" to "tenant~namespace~name":
// one-to-one ('~' is in no topic), and no '.' (the hierarchy separator).
func scopedPhysical(t ports.Topic) string { return t.Physical("~") }

// subscribeOpts are the SUBSCRIBE headers of spec: the prefetch, and
// activemq.exclusive for SingleActive (one consumer at a time).
func subscribeOpts(spec ports.SubscriptionSpec) []func(*frame.Frame) error {
	opts := []func(*frame.Frame) error{stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(spec.InFlight))}
	if spec.SingleActive {
		opts = append(opts, stomp.SubscribeOpt.Header("activemq.exclusive", "true"))
	}
	return opts
}

// sendExtras are persistent:false for BestEffort, and the JMS expiration
// ("expires", Unix ms) now + the topic's declared Retention.
func (d *conn) sendExtras(m *ports.Message, now time.Time) []func(*frame.Frame) error {
	var extra []func(*frame.Frame) error
	if d.declared.QoS(m) == ports.BestEffort {
		extra = append(extra, func(f *frame.Frame) error { f.Header.Set("persistent", "false"); return nil })
	}
	if r := d.declared.Retention(m.Topic); r > 0 {
		extra = append(extra, stomp.SendOpt.Header("expires", strconv.FormatInt(now.Add(r).UnixMilli(), 10)))
	}
	return extra
}

// DeclareTopic records spec (STOMP stores no topic properties): Send
// applies Retention as each message's JMS expiration, so every publishing
// process declares the topic. Groups are created as DeclareGroup does.
func (d *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return d.declared.Declare(ctx, spec, kit.DeclareGroups(d))
}

// DeclareGroup implements driver.GroupDeclarer: a SUBSCRIBE that receives
// nothing creates the group's consumer queue, which the broker keeps.
func (d *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if err := topic.Validate(); err != nil {
		return err
	}
	if group == "" {
		return &ports.ValueError{Field: "group", Reason: "is required to declare a group"}
	}
	q, err := d.queueFor(ports.SubscriptionSpec{Topic: topic, Group: group})
	if err != nil {
		return err
	}
	// Idempotent: a connection lost meanwhile (seen under load) is retried.
	attempts := 0
	return kit.Reconnect(ctx, kit.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}, func(ctx context.Context) error {
		err := d.declareQueue(ctx, q)
		if attempts++; !errors.Is(err, errLost) || attempts == 3 {
			return kit.Permanent(err)
		}
		return err
	}, nil)
}

// declareQueue makes q exist with a short-lived subscription.
func (d *conn) declareQueue(ctx context.Context, q string) error {
	c, err := d.dial(ctx)
	if err != nil {
		return err
	}
	defer c.close(true)
	return c.wait(ctx, func() error {
		// A selector no message matches: nothing comes back redelivered.
		_, err := c.c.Subscribe(q, stomp.AckClientIndividual,
			stomp.SubscribeOpt.Header("selector", "sluice_declare_only IS NOT NULL AND 1 = 0"),
			stomp.SubscribeOpt.Header("activemq.prefetchSize", "1"))
		if err != nil {
			return fmt.Errorf("activemq: create queue %s at %s: %w", q, d.opts.Addr, err)
		}
		if err := c.barrier(); err != nil {
			return fmt.Errorf("activemq: create queue %s at %s: %w", q, d.opts.Addr, err)
		}
		// No UNSUBSCRIBE (go-stomp 3.1.3 leaks its receipt wait when the
		// connection dies): the consumer ends with the connection.
		return nil
	}, nil, nil)
}

// Physical names (docs/adapters/activemq.md): a topic is the virtual
// topic VirtualTopic.<ns>.<topic>, a group's queue Consumer.<group>.…, an
// instance's Consumer.<group>__<instance>.…, a dead-letter topic a queue.

func (d *conn) physical(t ports.Topic) string { return d.opts.Namespace + "." + scopedPhysical(t) }

func isDeadLetterTopic(t ports.Topic) bool {
	_, ok := t.DeadLetterOf()
	return ok
}

// sendDest is where Send publishes a message for t.
func (d *conn) sendDest(t ports.Topic) string {
	if isDeadLetterTopic(t) {
		return "/queue/" + d.physical(t)
	}
	if e, ok := d.adopted(t); ok {
		return e.Destination
	}
	return "/topic/VirtualTopic." + d.physical(t)
}

// queueFor is the queue a subscription consumes.
func (d *conn) queueFor(spec ports.SubscriptionSpec) (string, error) {
	if isDeadLetterTopic(spec.Topic) {
		return "/queue/" + d.physical(spec.Topic), nil
	}
	if e, ok := d.adopted(spec.Topic); ok {
		return adoptedQueue(e, spec)
	}
	return consumerQueue(spec, "VirtualTopic."+d.physical(spec.Topic)), nil
}

// consumerQueue is spec's queue on the virtual topic vt.
func consumerQueue(spec ports.SubscriptionSpec, vt string) string {
	name := escape(spec.Group)
	if spec.Mode == ports.Broadcast {
		name += "__" + escape(spec.Instance)
	}
	return "/queue/Consumer." + name + "." + vt
}

// escape makes s one destination segment: letters, digits and '-' stay,
// every other byte becomes "_xx" (lower-case hex), so different inputs
// give different segments and "__" never appears in the output.
func escape(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
