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
	// InstanceGuard is how a second running Broadcast subscription with
	// the same Instance is refused or detected.
	InstanceGuard InstanceGuard
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
	flag("confirm", c.PublisherConfirm)
	flag("native-batch", c.NativeBatch)
	flag("expiry", c.SubscriptionExpiry)
	flag("durable-groups", c.DurableGroups)
	flag("exact-redelivery-count", c.ExactRedeliveryCount)
	fmt.Fprintf(&b, " ordering=%s instance-guard=%s", c.Ordering, c.InstanceGuard)
	return b.String()
}
