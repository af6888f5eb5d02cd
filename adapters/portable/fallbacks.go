package portable

import (
	"context"
	"log/slog"

	"github.com/sluicemq/sluice/ports"
)

// Fallback is what the core does for a capability the broker lacks.
type Fallback struct {
	// Capability is the missing capability's name as in
	// ports.Capabilities.String ("delay", "native-dlq").
	Capability string
	// Effect is the documented fallback in force.
	Effect string
	// Degraded is true when the fallback weakens a guarantee rather than
	// replacing the broker's mechanism (logged as a warning).
	Degraded bool
}

// Fallbacks lists the fallbacks in force for an adapter with caps, in the
// order of ports.Capabilities.String.
func Fallbacks(caps ports.Capabilities) []Fallback {
	var fs []Fallback
	add := func(missing bool, name, effect string, degraded bool) {
		if missing {
			fs = append(fs, Fallback{Capability: name, Effect: effect, Degraded: degraded})
		}
	}
	add(!caps.DelayedMessage, "delay", "delayed messages are stored at once and held by the consuming adapter's local scheduler until due, unacknowledged (taking a prefetch or receive-maximum slot where the broker has one)", false)
	add(!caps.DelayedRequeue, "delayed-requeue", "the requeue backoff is held by the consuming adapter's local scheduler; the delivery stays unacknowledged meanwhile and, where the broker bounds unacknowledged deliveries (a prefetch, a receive maximum), takes one of those slots", false)
	add(!caps.NativeDeadLetter, "native-dlq", `dead letters are published with confirms to the explicit "<topic>.dlq" topic`, false)
	add(!caps.Broadcast, "broadcast", "BROADCAST subscriptions are refused (ports.ErrUnsupported)", true)
	add(!caps.PerMessageAck, "per-message-ack", "settlements are applied in delivery order; one slow delivery holds back the acks behind it", false)
	add(!caps.PublisherConfirm, "confirm", "Send cannot prove the broker stored a message: this adapter is not certified", true)
	add(!caps.NativeBatch, "native-batch", "batches are windows the adapter builds over single deliveries", false)
	add(!caps.SubscriptionExpiry, "expiry", "SubscriptionSpec.InstanceTTL is not honoured; what becomes of a stopped instance's subscription (removed at stop, or kept until removed by hand) is the adapter's and its guide says which", false)
	add(!caps.DurableGroups, "durable-groups", "messages published while every instance of a group is down may not be kept for it", true)
	add(!caps.ExactRedeliveryCount, "exact-redelivery-count", "the redelivery count is a lower bound: a message may get more attempts than RetryPolicy.MaxAttempts", true)
	add(!caps.StartEarliest, "start-earliest", "SubscriptionSpec.Start StartEarliest is refused (ports.ErrUnsupported): a new group starts at the latest message", false)
	add(!caps.SingleActive, "single-active", "SubscriptionSpec.SingleActive is refused (ports.ErrUnsupported): run one instance of the group, or elect one outside sluice", false)
	add(!caps.BestEffort, "best-effort", "QoS BestEffort travels at-least-once (stronger, not cheaper): best-effort messages are confirmed, requeued and dead-lettered like any other, and Subscribe says so", false)
	add(!caps.Retention, "retention", "a TopicSpec with a Retention is refused by DeclareTopic (ports.ErrUnsupported): messages wait until consumed", false)
	add(!caps.MaxLength, "max-length", "a TopicSpec with a MaxLength is refused by DeclareTopic (ports.ErrUnsupported): a group's backlog is not capped", false)
	add(caps.Ordering == ports.OrderNone, "ordering", "no delivery order is guaranteed; use a partition key on a per-key broker or operators.KeyOrdered", false)
	add(caps.MaxMessageBytes <= 0, "max-message-bytes", "no payload limit is declared: Send checks no size, and a message the broker refuses for its size fails there", false)
	add(caps.Broadcast && caps.InstanceGuard == ports.InstanceUnguarded, "instance-guard", "two running BROADCAST subscriptions with one SubscriptionSpec.Instance are not noticed: they split the instance's copy; give each running instance its own Instance", true)
	add(caps.Broadcast && caps.InstanceGuard == ports.InstanceRefusedInProcess, "instance-guard", "a second running BROADCAST subscription with the same Instance is refused only among this process's subscriptions; another process's is not seen", false)
	return fs
}

// Messages of the start-up records LogCapabilities writes.
const (
	// ReadyMessage is the Info record of an adapter's capabilities and
	// fallbacks that New logs.
	ReadyMessage = "sluice: adapter ready"
	// DegradedMessage is the Warn record of each guarantee the broker
	// lacks.
	DegradedMessage = "sluice: adapter lacks a guarantee"
)

// LogCapabilities logs msg at Info with attrs, the adapter's name, its
// capabilities and the fallbacks in force, then one DegradedMessage
// warning per guarantee the fallbacks weaken. New logs it with
// ReadyMessage; adapters.Open logs it once with the URL instead.
func LogCapabilities(l *slog.Logger, msg, name string, caps ports.Capabilities, attrs ...any) {
	fs := Fallbacks(caps)
	attrs = append([]any{"adapter", name}, attrs...)
	attrs = append(attrs, "capabilities", caps.String())
	if len(fs) > 0 {
		fb := make([]any, 0, len(fs))
		for _, f := range fs {
			fb = append(fb, slog.String(f.Capability, f.Effect))
		}
		attrs = append(attrs, slog.Group("fallbacks", fb...))
	}
	l.Info(msg, attrs...)
	for _, f := range fs {
		if f.Degraded {
			l.LogAttrs(context.Background(), slog.LevelWarn, DegradedMessage,
				slog.String("adapter", name), slog.String("capability", f.Capability), slog.String("fallback", f.Effect))
		}
	}
}
