package mqtt

import "github.com/sluicemq/sluice/ports"

// SetPublishFault makes every publish of a (sends, requeue and dead-letter
// copies) consult f first; a non-nil error fails the publish as an
// unconfirmed one. Tests only; set before the adapter is shared.
func SetPublishFault(a *Adapter, f func(topic string) error) { a.c.publishFault = f }

// HeldBack reports how many acknowledged deliveries of a's subscriptions
// wait behind an unacknowledged one.
func HeldBack(a *Adapter) int {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	n := 0
	for _, s := range a.c.subs {
		s.mu.Lock()
		for _, e := range s.order {
			if e.acked {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// SetArrivalHook makes every subscription of a report each PUBLISH its
// connection received (message id, DUP flag) before handling it, so tests
// can tell a message the broker never delivered from one the adapter
// dropped. Set before subscribing.
func SetArrivalHook(a *Adapter, f func(id string, dup bool)) { a.c.arrived = f }

// ClientID is the client id of a subscription to spec in namespace ns
// (spec.Instance set).
func ClientID(ns string, spec ports.SubscriptionSpec) string {
	return clientID(ns, spec, spec.Instance)
}
