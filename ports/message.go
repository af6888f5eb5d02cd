package ports

import (
	"time"
)

// Message is an outbound message.
type Message struct {
	// Topic is the logical destination.
	Topic Topic
	// Key is the partition key: it decides ordering (on brokers that order
	// per key) and is mirrored into HeaderPartitionKey for brokers without a
	// key field.
	Key string
	// Payload is the encoded body (JSON by convention, encoded by the
	// caller, or by flow.NewMessage and flow.Send — never by a broker-side
	// converter).
	Payload []byte
	// Headers are the envelope and user headers. Send fills HeaderID when
	// it is missing (see Stamp).
	Headers Headers
	// Delay asks for delivery no earlier than Delay after the broker
	// confirmed the publish. Zero means now. Adapters without native delay
	// use the local scheduler (see Capabilities.DelayedMessage).
	Delay time.Duration
	// QoS is the message's delivery class: AtLeastOnce (default) or
	// BestEffort, which the broker may drop (see QoS). ExactlyOnce is
	// refused by Validate.
	QoS QoS
}

// ID returns the message id header.
func (m *Message) ID() string { return m.Headers.Get(HeaderID) }

// Validate reports whether m can be sent.
func (m *Message) Validate() error {
	if err := m.Topic.Validate(); err != nil {
		return err
	}
	if m.Delay < 0 {
		return &ValueError{Field: "Message.Delay", Reason: "must not be negative"}
	}
	return m.QoS.validate("Message.QoS")
}

// Delivery is one inbound delivery of a message.
//
// A Delivery belongs to the core from Receive until it is settled; adapters
// must not mutate it after handing it over, except through Settle. Its
// Payload, Headers and Facts may be shared with other deliveries of the
// same message (broadcast copies, redeliveries): treat them as read-only
// and copy before changing.
type Delivery struct {
	// Message is the message as published (Delay is zero).
	Message
	// ID is the message's identity, stable across redeliveries, so it is
	// the idempotency key: the producer's id (HeaderID, or the broker's
	// message-id field) when the producer set one, otherwise an identity
	// the broker assigned (Kafka topic/partition/offset, the Redis entry
	// id, ...), otherwise "" — the message has no identity (HasIdentity is
	// false) and must not be deduplicated by ID. IDSource says which; the
	// rule is the same on every adapter (see IDSource).
	ID string
	// IDSource is where ID comes from: IDNone exactly when ID is "".
	IDSource IDSource
	// RedeliveryCount is how many times this message was delivered before
	// this delivery (0 on the first delivery). Exact where the adapter
	// declares Capabilities.ExactRedeliveryCount, a lower bound otherwise.
	RedeliveryCount int
	// Facts carries broker-specific facts (partition, offset, delivery tag,
	// queue name, ...) for logs and debugging, read through accessors
	// (Facts.Get walks a handful of entries). Read-only, possibly shared by
	// redeliveries; never needed for settlement.
	Facts Facts
	// ReceivedAt is when the adapter received the delivery from the broker.
	ReceivedAt time.Time

	// Err, when set by the adapter, says the delivery's envelope could not
	// be decoded (a malformed redelivery-count header, a broken property).
	// The core dead-letters such a delivery as poison with Err as the
	// reason, without handing it to the pipeline. Adapters set it instead of
	// dropping or guessing.
	Err error

	// Decoded is the payload as the subscription decoded it with the
	// decoder flow.Decode gave it (Predecoder), or nil. Handlers read the
	// typed value flow.Decode hands on instead.
	Decoded any

	// Handle is the adapter's private settlement handle (a delivery tag,
	// an offset, a message id). The core never reads it.
	Handle any
}
