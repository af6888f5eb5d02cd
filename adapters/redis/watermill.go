package redis

import (
	wmbridge "github.com/sluicemq/sluice/adapters/watermill"
	"github.com/sluicemq/sluice/ports"
)

// WatermillPublisher is a Watermill message.Publisher over a sluice sender
// (the shared bridge, adapters/watermill): Publish returns when Redis
// confirmed every message at the adapter's durability level. With an
// Adapter made with RawStreamNames and WireWatermill, watermill-redisstream
// subscribers read what it publishes.
type WatermillPublisher = wmbridge.Publisher

// WatermillSubscriber is a Watermill message.Subscriber over a sluice
// adapter (the shared bridge, adapters/watermill): an ack is an XACK, a
// nack leaves the entry pending and has it claimed again with its delivery
// counted (unlike watermill-redisstream, whose nack hands the same entry
// to the handler in-process and changes nothing in Redis), Close or a
// cancelled context leave every unacked message pending for the group. A
// message whose envelope cannot be read is dead-lettered to
// "<topic>.dlq" before Watermill sees it.
type WatermillSubscriber = wmbridge.Subscriber

// WatermillSubscriberConfig configures a WatermillSubscriber: Group is the
// consumer group (default "watermill"), InFlight the XREADGROUP COUNT
// (default 1), NackDelay how long a nacked entry stays pending before
// XAUTOCLAIM hands it out again (default 0: at once).
type WatermillSubscriberConfig = wmbridge.SubscriberConfig

// NewWatermillPublisher returns a publisher over s. Closing the publisher
// does not close s.
func NewWatermillPublisher(s ports.Sender) *WatermillPublisher { return wmbridge.NewPublisher(s) }

// NewWatermillSubscriber returns a subscriber over a. Closing the
// subscriber does not close a.
func NewWatermillSubscriber(a ports.Adapter, cfg WatermillSubscriberConfig) *WatermillSubscriber {
	return wmbridge.NewSubscriber(a, cfg)
}
