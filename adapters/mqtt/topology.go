package mqtt

import (
	"context"
	"fmt"
	"strings"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// MaxPacketBytes is the largest MQTT control packet (256 MiB - 1), topic
// and headers included; a broker's CONNACK Maximum Packet Size lowers it.
const MaxPacketBytes = 268_435_455

// Existing adopts the MQTT topic (and share names) other programs already
// use for one logical topic, byte for byte. Nothing is created.
type Existing struct {
	// Topic is the logical topic.
	Topic ports.Topic
	// PhysicalTopic is Topic's MQTT topic, used as it is (not under
	// "<ns>/", no wildcards, no leading '$'); dead letters go to
	// "<PhysicalTopic>/dlq".
	PhysicalTopic string
	// Shares maps a group to its existing share name
	// ("$share/<name>/<PhysicalTopic>"); default the group's name.
	Shares map[string]string
}

func validateExisting(ns string, ex []Existing) error {
	topics := map[ports.Topic]bool{}
	phys := map[string]ports.Topic{}
	for i, e := range ex {
		field := fmt.Sprintf("mqtt.Options.Existing[%d]", i)
		if err := e.Topic.Validate(); err != nil {
			return &ports.ValueError{Field: field + ".Topic", Reason: err.Error()}
		}
		if topics[e.Topic] {
			return &ports.ValueError{Field: field + ".Topic", Reason: fmt.Sprintf("%q is adopted twice", e.Topic)}
		}
		topics[e.Topic] = true
		p := e.PhysicalTopic
		if p == "" || strings.ContainsAny(p, "+#\x00") || strings.HasPrefix(p, "$") {
			return &ports.ValueError{Field: field + ".PhysicalTopic", Reason: fmt.Sprintf("%q must be a non-empty MQTT topic without wildcards, not starting with '$'", p)}
		}
		if p == ns || strings.HasPrefix(p, ns+"/") {
			return &ports.ValueError{Field: field + ".PhysicalTopic", Reason: fmt.Sprintf("%q lies under the namespace %q, where the adapter derives names: it could be another logical topic's", p, ns)}
		}
		for _, q := range []string{p, p + dlqLevel} {
			if other, ok := phys[q]; ok {
				return &ports.ValueError{Field: field + ".PhysicalTopic", Reason: fmt.Sprintf("%q is also the physical (or dead-letter) topic of %q", q, other)}
			}
			phys[q] = e.Topic
		}
		for g, share := range e.Shares {
			if err := checkName(field+".Shares", share, " (the share name of group "+g+")"); err != nil {
				return err
			}
		}
	}
	return nil
}

// adopted returns the Existing entry of logical topic t.
func (c *conn) adopted(t ports.Topic) (Existing, bool) {
	for _, e := range c.opts.Existing {
		if e.Topic == t {
			return e, true
		}
	}
	return Existing{}, false
}

// physical is the MQTT topic of t: an adopted name (its dead-letter topic
// "<PhysicalTopic>/dlq"), or physicalTopic's.
func (c *conn) physical(t ports.Topic) string {
	if len(c.opts.Existing) > 0 {
		if e, ok := c.adopted(t); ok {
			return e.PhysicalTopic
		}
		if base, ok := strings.CutSuffix(string(t), ports.DeadLetterSuffix); ok {
			if e, ok := c.adopted(ports.Topic(base)); ok {
				return e.PhysicalTopic + dlqLevel
			}
		}
	}
	return physicalTopic(c.opts.Namespace, t)
}

// filter is the topic filter a subscription subscribes to.
func (c *conn) filter(spec ports.SubscriptionSpec) string {
	phys := c.physical(spec.Topic)
	if spec.Mode != ports.LoadBalance {
		return phys
	}
	share := spec.Group
	if e, ok := c.adopted(spec.Topic); ok && e.Shares[spec.Group] != "" {
		share = e.Shares[spec.Group]
	}
	return "$share/" + share + "/" + phys
}

// DeclareTopic records spec, applied at Send (MQTT stores no topic
// properties): Retention is every PUBLISH's Message Expiry Interval, a
// BestEffort class publishes at QoS 0. Groups go to DeclareGroup.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return c.declared.Declare(ctx, spec, kit.DeclareGroups(c))
}

// DeclareGroup creates the session of the member with Options.Instance,
// subscribed to the group's share: a broker keeps a group's messages only
// in members' sessions. What reaches this connection is never
// acknowledged: it comes back to the member (DUP).
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if err := topic.Validate(); err != nil {
		return err
	}
	if err := checkName("group", group, shareWhy); err != nil {
		return err
	}
	if !c.instanceSet {
		return &ports.ValueError{Field: "mqtt.Options.Instance", Reason: fmt.Sprintf("must be set to declare group %q of %q ahead: the group's messages wait in the session of the member with that Instance", group, topic)}
	}
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	id := clientID(c.opts.Namespace, spec, c.opts.Instance)
	c.mu.Lock()
	live := c.subs[id] != nil
	c.mu.Unlock()
	if live {
		return nil // this process's member holds the session
	}
	present := make(chan bool, 1)
	cm, err := c.connect(ctx, connSpec{clientID: id, expiry: seconds(c.opts.SessionExpiry),
		session:   newAckSession(state.NewInMemory()),
		onPublish: func(paho.PublishReceived) (bool, error) { return true, nil }, // never released: no PUBACK
		onUp: func(_ *autopaho.ConnectionManager, ca *paho.Connack) {
			select {
			case present <- ca.SessionPresent:
			default:
			}
		}})
	if err != nil {
		return err
	}
	defer func() { _ = cm.Disconnect(context.Background()) }()
	select {
	case p := <-present:
		if p {
			return nil
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := subscribe(ctx, cm, c.filter(spec), 1, false); err != nil {
		return fmt.Errorf("mqtt: declare group %q: %w", group, err)
	}
	return nil
}

// maxMessageBytes is MaxPacketBytes or the broker's smaller limit.
func (c *conn) maxMessageBytes() int {
	if c == nil {
		return MaxPacketBytes
	}
	if n := c.maxPacket.Load(); n > 0 && n < MaxPacketBytes {
		return int(n)
	}
	return MaxPacketBytes
}

// envelopeBytes is a PUBLISH's size besides its payload, at its largest.
func envelopeBytes(p *paho.Publish) int {
	n := 5 + 2 + len(p.Topic) + 2 + 4
	if p.Properties != nil {
		for _, u := range p.Properties.User {
			n += 1 + 2 + len(u.Key) + 2 + len(u.Value)
		}
		if p.Properties.ContentType != "" {
			n += 1 + 2 + len(p.Properties.ContentType)
		}
		if p.Properties.MessageExpiry != nil {
			n += 5
		}
	}
	return n
}
