package mqtt

import (
	"cmp"
	"context"
	"fmt"
	"strings"

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
		bad := kit.Invalid(fmt.Sprintf("mqtt.Options.Existing[%d].", i))
		p := e.PhysicalTopic
		switch {
		case e.Topic.Validate() != nil:
			return bad("Topic", "%v", e.Topic.Validate())
		case topics[e.Topic]:
			return bad("Topic", "%q is adopted twice", e.Topic)
		case p == "" || strings.ContainsAny(p, "+#\x00") || strings.HasPrefix(p, "$"):
			return bad("PhysicalTopic", "%q must be a non-empty MQTT topic without wildcards, not starting with '$'", p)
		case p == ns || strings.HasPrefix(p, ns+"/"):
			return bad("PhysicalTopic", "%q lies under the namespace %q, where the adapter derives names: it could be another logical topic's", p, ns)
		}
		topics[e.Topic] = true
		for _, q := range []string{p, p + dlqLevel} {
			if other, ok := phys[q]; ok {
				return bad("PhysicalTopic", "%q is also the physical (or dead-letter) topic of %q", q, other)
			}
			phys[q] = e.Topic
		}
		for g, share := range e.Shares {
			if err := checkName(fmt.Sprintf("mqtt.Options.Existing[%d].Shares", i), share, " (the share name of group "+g+")"); err != nil {
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
	if e, ok := c.adopted(t); ok {
		return e.PhysicalTopic
	}
	if base, ok := t.DeadLetterOf(); ok {
		if e, ok := c.adopted(base); ok {
			return e.PhysicalTopic + dlqLevel
		}
	}
	return physicalTopic(c.opts.Namespace, t)
}

// filter is the topic filter a subscription subscribes to.
func (c *conn) filter(spec ports.SubscriptionSpec) string {
	if spec.Mode != ports.LoadBalance {
		return c.physical(spec.Topic)
	}
	e, _ := c.adopted(spec.Topic)
	return "$share/" + cmp.Or(e.Shares[spec.Group], spec.Group) + "/" + c.physical(spec.Topic)
}

// DeclareTopic records spec, applied at Send (MQTT stores no topic
// properties): Retention is every PUBLISH's Message Expiry Interval, a
// BestEffort class publishes at QoS 0. Groups go to DeclareGroup.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	return c.declared.Declare(ctx, spec, kit.DeclareGroups(c))
}

// DeclareGroup creates the session of the member with Options.Instance,
// subscribed to the group's share, and disconnects: a broker keeps a
// group's messages only in members' sessions. What reaches this connection
// is never acknowledged: it comes back to the member (DUP).
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if !c.instanceSet {
		return &ports.ValueError{Field: "mqtt.Options.Instance", Reason: fmt.Sprintf("must be set to declare group %q of %q ahead: the group's messages wait in the session of the member with that Instance", group, topic)}
	}
	spec := ports.SubscriptionSpec{Topic: topic, Group: group, Instance: c.opts.Instance}
	c.mu.Lock()
	live := c.subs[clientID(c.opts.Namespace, spec, spec.Instance)] != nil
	c.mu.Unlock()
	if live {
		return nil // this process's member holds the session
	}
	s, err := c.newSubscription(ctx, spec, true)
	if err != nil {
		return fmt.Errorf("mqtt: declare group %q: %w", group, err)
	}
	return s.Close(ctx)
}
