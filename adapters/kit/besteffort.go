package kit

import "github.com/sluicemq/sluice/ports"

// BestEffortDisposition returns the disposition a subscription carries
// out: on a best-effort subscription (SubscriptionSpec.QoS BestEffort, on
// an adapter with Capabilities.BestEffort) Requeue and DeadLetter become
// Ack — a best-effort message is dropped, never requeued or dead-lettered
// beyond what the broker does on its own (ports.BestEffort). Any other
// disposition is returned as it is.
func BestEffortDisposition(spec ports.SubscriptionSpec, d ports.Disposition) ports.Disposition {
	if spec.QoS == ports.BestEffort && (d.Action == ports.Requeue || d.Action == ports.DeadLetter) {
		return ports.Disposition{Action: ports.Ack}
	}
	return d
}
