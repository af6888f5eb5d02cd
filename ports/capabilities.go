package ports

import (
	"fmt"
	"strings"
)

// Ordering is the delivery order an adapter guarantees.
type Ordering int

const (
	// OrderNone: no order is guaranteed (competing consumers, requeues).
	OrderNone Ordering = iota
	// OrderPerKey: messages with the same partition key are delivered in
	// publish order to one consumer at a time.
	OrderPerKey
)

func (o Ordering) String() string {
	if o == OrderPerKey {
		return "per-key"
	}
	return "none"
}

// Capabilities declare what an adapter's broker does natively. The core
// applies a documented fallback for what is missing and never pretends a
// capability exists; the TCK skips a case only when a capability says so.
type Capabilities struct {
	// DelayedMessage: Message.Delay is honoured by the broker. Fallback:
	// the adapter holds the message with the local scheduler.
	DelayedMessage bool
	// DelayedRequeue: Disposition.Delay is honoured natively.
	DelayedRequeue bool
	// NativeDeadLetter: the broker dead-letters with a confirmed publish.
	// Fallback: an explicit "<topic>.dlq" topic.
	NativeDeadLetter bool
	// Broadcast: Mode Broadcast is supported.
	Broadcast bool
	// PerMessageAck: each delivery can be settled on its own, out of order.
	PerMessageAck bool
	// CompetingConsumers: a LoadBalance group's messages are shared out one
	// by one to its running instances, however many there are, and a
	// message held or requeued by one instance holds back none after it (a
	// queue, a Kafka share group; not a Kafka consumer group, whose
	// partitions bound its busy instances and its commits).
	CompetingConsumers bool
	// PublisherConfirm: Send returns only after a broker confirm. Adapters
	// without it are not certified.
	PublisherConfirm bool
	// NativeBatch: the broker hands out batches (fallback: an adapter-side
	// window over single deliveries).
	NativeBatch bool
	// SubscriptionExpiry: SubscriptionSpec.InstanceTTL is honoured.
	SubscriptionExpiry bool
	// DurableGroups: messages published while every instance of a
	// LoadBalance group is down are kept for the group.
	DurableGroups bool
	// ExactRedeliveryCount: Delivery.RedeliveryCount is exact, not a bound.
	ExactRedeliveryCount bool
	// Ordering is the order guarantee.
	Ordering Ordering

	// StartEarliest: SubscriptionSpec.Start StartEarliest is honoured (a
	// new group starts at the oldest retained message). Without it the
	// adapter refuses StartEarliest with ErrUnsupported.
	StartEarliest bool
	// SingleActive: SubscriptionSpec.SingleActive is honoured, with
	// failover to a standing-by instance. Without it it is refused.
	SingleActive bool
	// BestEffort: the broker has a weaker, cheaper class for QoS
	// BestEffort (non-persistent, QoS 0, transient). Fallback: such
	// messages travel at-least-once.
	BestEffort bool
	// Retention: TopicSpec.Retention is enforced by the broker (messages
	// older than it are dropped unconsumed). Without it a TopicSpec with
	// Retention is refused by DeclareTopic.
	Retention bool
	// MaxLength: TopicSpec.MaxLength is enforced (a group's backlog is
	// capped, the oldest dropped). Without it it is refused.
	MaxLength bool
	// MaxMessageBytes is the largest message Send accepts (0: no limit
	// known); a larger one fails with a *SizeError before touching the
	// broker. SizeCountsEnvelope says whether the limit counts the
	// encoded headers as well as the payload.
	MaxMessageBytes    int
	SizeCountsEnvelope bool

	// DeliveryLimit is how many times the broker delivers a message
	// before it stops by itself (archives, drops or dead-letters it),
	// whatever the subscription's RetryPolicy says (0: no such limit; a
	// Kafka share group's group.share.delivery.count.limit). The core
	// never lets a message reach it: a requeue of a delivery at the limit
	// is a counted copy (the original acknowledged), as on a broker
	// without a native requeue.
	DeliveryLimit int

	// InstanceGuard is how a second running Broadcast subscription with
	// the same Instance is refused or detected.
	InstanceGuard InstanceGuard

	// TransactionalSend: the adapter is a TransactionalSubscriber — a
	// consumed position and the messages produced for it commit in one
	// broker transaction (Kafka), so a consume-transform-produce pipeline
	// is exactly once (flow.TransactSink). Without it such a pipeline is
	// refused at Start with ErrExactlyOnce.
	TransactionalSend bool
}

// String lists the capabilities for a start-up log line.
func (c Capabilities) String() string {
	var b strings.Builder
	flag := func(name string, on bool) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if !on {
			b.WriteByte('-')
		}
		b.WriteString(name)
	}
	flag("delay", c.DelayedMessage)
	flag("delayed-requeue", c.DelayedRequeue)
	flag("native-dlq", c.NativeDeadLetter)
	flag("broadcast", c.Broadcast)
	flag("per-message-ack", c.PerMessageAck)
	if c.CompetingConsumers { // listed where declared only
		flag("competing-consumers", true)
	}
	flag("confirm", c.PublisherConfirm)
	flag("native-batch", c.NativeBatch)
	flag("expiry", c.SubscriptionExpiry)
	flag("durable-groups", c.DurableGroups)
	flag("exact-redelivery-count", c.ExactRedeliveryCount)
	flag("start-earliest", c.StartEarliest)
	flag("single-active", c.SingleActive)
	flag("best-effort", c.BestEffort)
	flag("retention", c.Retention)
	flag("max-length", c.MaxLength)
	if c.TransactionalSend { // listed where declared only
		flag("transactional-send", true)
	}
	fmt.Fprintf(&b, " ordering=%s instance-guard=%s", c.Ordering, c.InstanceGuard)
	if c.MaxMessageBytes > 0 {
		fmt.Fprintf(&b, " max-message-bytes=%d", c.MaxMessageBytes)
	}
	if c.DeliveryLimit > 0 {
		fmt.Fprintf(&b, " delivery-limit=%d", c.DeliveryLimit)
	}
	return b.String()
}
