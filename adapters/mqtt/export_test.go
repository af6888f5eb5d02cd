package mqtt

// SetPublishFault makes every publish of a (sends and dead-letter
// publishes) consult f first; a non-nil error fails the publish as an
// unconfirmed one. Tests only; set before the adapter is shared.
func SetPublishFault(a *Adapter, f func(topic string) error) { a.publishFault = f }

// HeldBack reports how many acknowledged deliveries of sub wait behind an
// unacknowledged one.
func HeldBack(sub any) int { return sub.(*subscription).sess.heldBack() }

// SetArrivalHook makes every subscription of a report each PUBLISH its
// connection received (message id, DUP flag) before handling it, so tests
// can tell a message the broker never delivered from one the adapter
// dropped. Set before subscribing.
func SetArrivalHook(a *Adapter, f func(id string, dup bool)) { a.arrived = f }
