package amqp

import (
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

// WatermillPublisher is a Watermill message.Publisher over a sluice sender
// (the shared bridge, adapters/watermill): Publish returns when the broker
// confirmed every message (the adapter's confirm channels, many confirms
// outstanding), not when the frames were written.
type WatermillPublisher = wmbridge.Publisher

// WatermillSubscriber is a Watermill message.Subscriber over a sluice
// adapter (the shared bridge, adapters/watermill), so a Watermill router
// runs on the adapter's settlement paths: an ack is a delivery-tag ack, a
// nack requeues the message with an exact redelivery count at the tail of
// the queue rather than at its head (after NackDelay, through a delay
// queue), headers that are not strings (x-death, typed values) are never
// a reason to reject a message, and Close or a cancelled context hand
// every unacked message back to the broker. A message whose envelope
// cannot be read is dead-lettered before Watermill sees it. Connection
// loss is recovered underneath; errors go to the config's OnError.
type WatermillSubscriber = wmbridge.Subscriber

// WatermillSubscriberConfig configures a WatermillSubscriber: Group is the
// LOAD_BALANCE group (a durable queue per topic, default "watermill"),
// InFlight the prefetch (default 1), NackDelay the delay-queue wait of a
// nacked message (default 0: requeued at once).
type WatermillSubscriberConfig = wmbridge.SubscriberConfig

// NewWatermillPublisher returns a publisher over s (typically an *Adapter).
// Closing the publisher does not close s.
func NewWatermillPublisher(s ports.Sender) *WatermillPublisher { return wmbridge.NewPublisher(s) }

// NewWatermillSubscriber returns a subscriber over a (typically an
// *Adapter); its SubscribeInitialize declares the group's queue
// (DeclareGroup). Closing the subscriber does not close a.
func NewWatermillSubscriber(a ports.Adapter, cfg WatermillSubscriberConfig) *WatermillSubscriber {
	return wmbridge.NewSubscriber(a, cfg)
}
