package activemq

import (
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

// WatermillPublisher is a Watermill message.Publisher over the adapter
// (the shared bridge, adapters/watermill): Publish returns once the broker
// confirmed every message (the COMMIT receipt of a Send).
type WatermillPublisher = wmbridge.Publisher

// WatermillSubscriber is a Watermill message.Subscriber over the adapter
// (the shared bridge, adapters/watermill): a message is acknowledged only
// when Watermill acks it, a nack requeues it (a STOMP transaction: the
// copy with count+1, the ack of the original; NackDelay through
// AMQ_SCHEDULED_DELAY), and Close or a cancelled context hand every
// unacknowledged message back to the broker. Queued acknowledgements are
// flushed before a subscription stops.
type WatermillSubscriber = wmbridge.Subscriber

// WatermillSubscriberConfig configures a WatermillSubscriber: Group is the
// LOAD_BALANCE group (the group's virtual-topic queue, default
// "watermill"), InFlight the prefetch (default 1), NackDelay the
// scheduled delay of a nacked message (default 0: requeued at once, at
// the tail of the queue).
type WatermillSubscriberConfig = wmbridge.SubscriberConfig

// NewWatermillPublisher returns a publisher over s (typically an
// *Adapter). Closing it does not close s.
func NewWatermillPublisher(s ports.Sender) *WatermillPublisher { return wmbridge.NewPublisher(s) }

// NewWatermillSubscriber returns a subscriber over a (typically an
// *Adapter). Closing it does not close a.
func NewWatermillSubscriber(a ports.Adapter, cfg WatermillSubscriberConfig) *WatermillSubscriber {
	return wmbridge.NewSubscriber(a, cfg)
}
