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
// bound, well below ActiveMQ's STOMP limit (maxDataLength, 100 MiB by
// default) and the memory limits that would otherwise block a producer on
// broker flow control instead of failing it. It counts the payload only;
// headers travel beside it (ActiveMQ bounds each STOMP header to 10 KiB).
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
		field := fmt.Sprintf("activemq.Options.Existing[%d]", i)
		if err := e.Topic.Validate(); err != nil {
			return &ports.ValueError{Field: field + ".Topic", Reason: err.Error()}
		}
		if isDeadLetterTopic(e.Topic) {
			return &ports.ValueError{Field: field + ".Topic", Reason: fmt.Sprintf("%q is a dead-letter topic: adopt its topic, whose dead letters go to the adapter's own queue", e.Topic)}
		}
		if seen[e.Topic] {
			return &ports.ValueError{Field: field + ".Topic", Reason: fmt.Sprintf("%q is adopted twice", e.Topic)}
		}
		seen[e.Topic] = true
		if !validDest(e.Destination, "/topic/", "/queue/") {
			return &ports.ValueError{Field: field + ".Destination", Reason: fmt.Sprintf("%q must be /topic/<name> or /queue/<name>", e.Destination)}
		}
		for g, q := range e.Queues {
			if g == "" || !validDest(q, "/queue/") {
				return &ports.ValueError{Field: field + ".Queues", Reason: fmt.Sprintf("group %q: %q must be /queue/<name>", g, q)}
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

// scopedPhysical maps a scoped topic "tenant/namespace/name" to
// "tenant~namespace~name": '~' is in no unscoped topic, tenant or
// namespace, so the mapping is one-to-one, and it adds no '.' (ActiveMQ's
// hierarchy separator, which wildcards and virtual topics match on).
func scopedPhysical(t ports.Topic) string { return t.Physical("~") }

// subscribeOpts are the SUBSCRIBE headers of spec: the prefetch, and
// activemq.exclusive for SingleActive (the broker dispatches to one
// consumer of the queue and fails over to another when it goes).
func subscribeOpts(spec ports.SubscriptionSpec) []func(*frame.Frame) error {
	opts := []func(*frame.Frame) error{stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(spec.InFlight))}
	if spec.SingleActive {
		opts = append(opts, stomp.SubscribeOpt.Header("activemq.exclusive", "true"))
	}
	return opts
}

// sendExtras are the SEND headers of m's class and its topic's declared
// retention: persistent:false for BestEffort (kept in memory only, lost
// on a broker restart), and the JMS expiration ("expires", absolute
// milliseconds) now + Retention.
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

// DeclareTopic implements driver.TopicDeclarer. ActiveMQ stores no topic
// properties over STOMP, so the driver records spec (a redeclaration with
// other properties fails with a *ports.RedeclareError) and applies
// Retention at Send as each message's JMS expiration, so every publishing
// process must declare the topic too. Expired messages are discarded by
// the broker (or moved to its ActiveMQ.DLQ, per its deadLetterStrategy).
// MaxLength is refused by the portable layer (queue limits are broker
// policy). Groups are created as DeclareGroup does.
func (d *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return d.declared.Declare(ctx, spec, kit.DeclareGroups(d))
}

// DeclareGroup implements driver.GroupDeclarer: it creates the group's
// virtual-topic consumer queue (a SUBSCRIBE that receives nothing on a
// connection of its own), which the broker keeps, so what is published
// from then on waits for the group's first consumer.
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
	// Creating the queue is idempotent: a connection lost during it (seen
	// under load, many declares at once) is retried on a new one.
	backoff := kit.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for attempt := 0; ; attempt++ {
		err = d.declareQueue(ctx, q)
		if !errors.Is(err, errLost) || attempt == 2 || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(backoff.Delay(attempt)):
		case <-ctx.Done():
			return err
		}
	}
}

// declareQueue makes q exist with one short-lived subscription on a
// connection of its own.
func (d *conn) declareQueue(ctx context.Context, q string) error {
	c, err := d.dial(ctx)
	if err != nil {
		return err
	}
	defer c.close(true)
	return c.wait(ctx, func() error {
		// A selector no message matches: nothing is dispatched to this
		// short-lived consumer, so nothing comes back marked redelivered.
		_, err := c.c.Subscribe(q, stomp.AckClientIndividual,
			stomp.SubscribeOpt.Header("selector", "sluice_declare_only IS NOT NULL AND 1 = 0"),
			stomp.SubscribeOpt.Header("activemq.prefetchSize", "1"))
		if err != nil {
			return fmt.Errorf("activemq: create queue %s at %s: %w", q, d.opts.Addr, err)
		}
		if err := c.barrier(); err != nil {
			return fmt.Errorf("activemq: create queue %s at %s: %w", q, d.opts.Addr, err)
		}
		// The consumer ends with the connection (the DISCONNECT of
		// c.close): no UNSUBSCRIBE, whose receipt wait go-stomp 3.1.3
		// never releases when the connection dies meanwhile (a goroutine
		// leaked per lost declare, seen under load).
		return nil
	}, nil, nil)
}
