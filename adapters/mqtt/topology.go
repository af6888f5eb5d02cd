package mqtt

import (
	"context"
	"fmt"
	"strings"

	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// MaxPacketBytes is the largest MQTT control packet the protocol can
// carry (a 4-byte variable-length "remaining length", 256 MiB - 1, plus
// the fixed header). A PUBLISH carries the topic, the properties (sluice's
// headers) and the payload in it, so the adapter's limit counts the
// envelope. A broker that announces a smaller Maximum Packet Size in its
// CONNACK (mosquitto's max_packet_size, message_size_limit) lowers it.
const MaxPacketBytes = 268_435_455

// Existing adopts an MQTT topic (and shared-subscription names) that other
// programs already use for one logical topic, so that a service moving to
// sluice keeps every name byte for byte (see Options.Existing). MQTT
// brokers create nothing ahead, so adopting is only naming.
type Existing struct {
	// Topic is the logical topic.
	Topic ports.Topic
	// PhysicalTopic is the MQTT topic Send publishes Topic's messages to
	// and subscriptions subscribe to, used as it is: no namespace prefix.
	// It must not contain wildcards ('+', '#'), start with '$' or lie
	// under the adapter's namespace ("<ns>/...", where derived names
	// live). The dead-letter topic is "<PhysicalTopic>/dlq".
	PhysicalTopic string
	// Shares maps a LoadBalance group to the share name of the existing
	// shared subscription ("$share/<name>/<PhysicalTopic>"). A group not
	// listed uses its own name.
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
			if !validName(share) {
				return &ports.ValueError{Field: field + ".Shares", Reason: fmt.Sprintf("share name %q of group %q must not contain '/', '+', '#' or '$'", share, g)}
			}
		}
	}
	return nil
}

// adopted returns the Existing entry of logical topic t.
func (a *Adapter) adopted(t ports.Topic) (Existing, bool) {
	for _, e := range a.opts.Existing {
		if e.Topic == t {
			return e, true
		}
	}
	return Existing{}, false
}

// physical is the MQTT topic of logical topic t: an adopted name, or
// "<ns>/<topic>" where a scoped topic "tenant/namespace/name" becomes the
// levels "<ns>/tenant/namespace/name" (see physicalTopic). A dead-letter
// topic of an adopted topic is "<PhysicalTopic>/dlq".
func (a *Adapter) physical(t ports.Topic) string {
	if len(a.opts.Existing) > 0 {
		if e, ok := a.adopted(t); ok {
			return e.PhysicalTopic
		}
		if base, ok := strings.CutSuffix(string(t), ports.DeadLetterSuffix); ok {
			if e, ok := a.adopted(ports.Topic(base)); ok {
				return e.PhysicalTopic + dlqLevel
			}
		}
	}
	return physicalTopic(a.opts.Namespace, t)
}

// filter is the topic filter a subscription subscribes to.
func (a *Adapter) filter(spec ports.SubscriptionSpec) string {
	phys := a.physical(spec.Topic)
	if spec.Mode != ports.LoadBalance {
		return phys
	}
	share := spec.Group
	if e, ok := a.adopted(spec.Topic); ok && e.Shares[spec.Group] != "" {
		share = e.Shares[spec.Group]
	}
	return "$share/" + share + "/" + phys
}

// DeclareTopic implements ports.TopicDeclarer. An MQTT broker stores no
// topic properties, so the adapter records spec (a redeclaration with
// other properties fails with a *ports.RedeclareError) and applies it at
// Send: Retention becomes the MQTT 5 Message Expiry Interval of every
// PUBLISH to the topic (rounded up to whole seconds), so every publishing
// process must declare the topic too. MaxLength is refused with
// ErrUnsupported. Groups are declared as DeclareGroup does.
func (a *Adapter) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if a.isClosed() {
		return fmt.Errorf("mqtt: declare: %w", ports.ErrClosed)
	}
	if spec.MaxLength > 0 {
		return fmt.Errorf("%w: mqtt cannot cap topic %q at %d messages (a broker's queue limits are per session and broker-wide)", ports.ErrUnsupported, spec.Topic, spec.MaxLength)
	}
	return a.declared.Declare(ctx, spec, kit.DeclareGroups(a))
}

// DeclareGroup implements ports.GroupDeclarer. An MQTT broker keeps a
// shared subscription's messages only in the sessions of its members, so
// declaring a group ahead creates the session of one member: the one with
// this adapter's Options.Instance (its client id, CleanStart false, kept
// for SessionExpiry), subscribed to the group's shared subscription. The
// broker queues the group's messages there until that member — a process
// with the same Instance, or this one — subscribes and resumes the
// session. It therefore needs Options.Instance set (a random one would
// strand the messages). Declaring a group whose session exists changes
// nothing; a message the broker pushes to the declaring connection is
// never acknowledged and comes back to the member (marked redelivered).
func (a *Adapter) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if err := topic.Validate(); err != nil {
		return err
	}
	if !validName(group) {
		return &ports.ValueError{Field: "group", Reason: fmt.Sprintf("%q must be non-empty without '/', '+', '#' or '$' (it names the MQTT shared subscription)", group)}
	}
	if !a.instanceSet {
		return &ports.ValueError{Field: "mqtt.Options.Instance", Reason: fmt.Sprintf("must be set to declare group %q of %q ahead: the group's messages wait in the session of the member with that Instance", group, topic)}
	}
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	id := clientID(a.opts.Namespace, spec, a.opts.Instance)
	a.mu.Lock()
	live, closed := a.clientIDs[id], a.closed
	a.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("mqtt: declare group: %w", ports.ErrClosed)
	case live:
		return nil // this process's member holds the session
	}
	present := make(chan bool, 1)
	cm, err := a.connect(ctx, connSpec{clientID: id, expiry: seconds(a.opts.SessionExpiry),
		session: newAckSession(state.NewInMemory()), errs: kit.NewErrors(4),
		onPublish: func(paho.PublishReceived) (bool, error) { return true, nil }, // never released: no PUBACK
		onUp: func(ca *paho.Connack) {
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
	filter := a.filter(spec)
	sa, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if err != nil {
		return fmt.Errorf("mqtt: declare group %q: subscribe %s: %w", group, filter, err)
	}
	if len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
		return fmt.Errorf("mqtt: declare group %q: subscribe %s: broker answered %v, want QoS 1 granted: %w", group, filter, sa.Reasons, errSubscribeRefused)
	}
	return nil
}

// checkSubscription refuses what MQTT cannot do for spec (defaults
// applied) and returns the QoS to subscribe at.
func checkSubscription(spec ports.SubscriptionSpec) (byte, error) {
	if spec.Start == ports.StartEarliest {
		return 0, fmt.Errorf("%w: mqtt keeps no history a new group could start from (StartEarliest); retained messages are one per topic, not a log", ports.ErrUnsupported)
	}
	if spec.SingleActive {
		return 0, fmt.Errorf("%w: mqtt shared subscriptions spread messages over every member; there is no single-active consumer (SingleActive)", ports.ErrUnsupported)
	}
	if spec.QoS == ports.BestEffort {
		return 0, nil
	}
	return 1, nil
}

// prepare applies m's class (or its topic's declared one) and its
// topic's declared retention to p and
// checks p's size against the broker's limit before anything is written.
func (a *Adapter) prepare(p *paho.Publish, m *ports.Message) error {
	if a.declared.QoS(m) == ports.BestEffort {
		p.QoS = 0
	}
	if r := a.declared.Retention(m.Topic); r > 0 {
		s := seconds(r)
		p.Properties.MessageExpiry = &s
	}
	return m.CheckSize(a.maxMessageBytes(), envelopeBytes(p))
}

// maxMessageBytes is the protocol's packet limit or the smaller Maximum
// Packet Size the broker announced.
func (a *Adapter) maxMessageBytes() int {
	if n := a.maxPacket.Load(); n > 0 && n < MaxPacketBytes {
		return int(n)
	}
	return MaxPacketBytes
}

// envelopeBytes is what a PUBLISH carries besides its payload: fixed
// header (at most 5 bytes), topic, packet id and the encoded properties
// (with their own length, at most 4 bytes), counted at their largest.
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
