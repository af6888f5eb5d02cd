package pulsar

import (
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/ports"
)

// Reserved metadata and property names of this package.
const (
	// KeyMetadata is the Watermill metadata key whose value the Publisher
	// sends as the Pulsar message key (not as a property). The Subscriber
	// puts a received message's key back under it.
	KeyMetadata = "pulsar-key"
	// UUIDProperty carries a Watermill message UUID that is not already the
	// "ce-id" property.
	UUIDProperty = "_watermill_message_uuid"
	// NotBeforeProperty carries the earliest delivery time of a delayed
	// message, in Unix milliseconds (rounded up). A Pulsar broker with
	// delayedDeliveryDeliverAtTimeStrict=false (its default) may dispatch a
	// delayed message up to one delayed-delivery tick early; the adapter
	// holds such a message until this time instead of handing it out early.
	NotBeforeProperty = "sluice-not-before"
)

// toProducerMessage maps a Watermill message onto a Pulsar one. now is the
// send time the not-before guard is computed from.
func toProducerMessage(m *message.Message, now time.Time) (*pulsarclient.ProducerMessage, error) {
	props := make(map[string]string, len(m.Metadata)+1)
	for k, v := range m.Metadata {
		props[k] = v
	}
	pm := &pulsarclient.ProducerMessage{Payload: m.Payload, Key: props[KeyMetadata]}
	delete(props, KeyMetadata)
	if s, ok := props[delay.DelayedForKey]; ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return nil, &ports.ValueError{Field: "metadata " + delay.DelayedForKey, Reason: strconv.Quote(s) + " is not a non-negative duration"}
		}
		if d > 0 {
			pm.DeliverAfter = d
			props[NotBeforeProperty] = strconv.FormatInt(ceilMilli(now.Add(d)), 10)
		}
	}
	delete(props, delay.DelayedForKey)
	delete(props, delay.DelayedUntilKey)
	if m.UUID != "" && props[ports.HeaderID] != m.UUID {
		props[UUIDProperty] = m.UUID
	}
	pm.Properties = props
	return pm, nil
}

// ceilMilli is t in Unix milliseconds, rounded up.
func ceilMilli(t time.Time) int64 {
	ns := t.UnixNano()
	ms := ns / int64(time.Millisecond)
	if ns%int64(time.Millisecond) > 0 {
		ms++
	}
	return ms
}

// notBefore parses NotBeforeProperty: zero time when absent, a
// *ports.HeaderError when malformed.
func notBefore(props map[string]string) (time.Time, error) {
	s, ok := props[NotBeforeProperty]
	if !ok {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms < 0 {
		return time.Time{}, &ports.HeaderError{Header: NotBeforeProperty, Value: s}
	}
	return time.UnixMilli(ms), nil
}

// toWatermill maps a sluice message onto the Watermill message the
// Publisher sends. It expects m stamped (ports.Message.Stamp).
func toWatermill(m *ports.Message) *message.Message {
	wm := message.NewMessage(m.Headers[ports.HeaderID], m.Payload)
	md := make(message.Metadata, len(m.Headers)+2)
	for k, v := range m.Headers {
		md[k] = v
	}
	if m.Key != "" {
		md[KeyMetadata] = m.Key
	}
	if m.Delay > 0 {
		md[delay.DelayedForKey] = m.Delay.String()
	}
	wm.Metadata = md
	return wm
}

// headersOf copies a received message's properties into envelope headers,
// without the transport-only NotBeforeProperty.
func headersOf(msg pulsarclient.Message) ports.Headers {
	props := msg.Properties()
	h := make(ports.Headers, len(props))
	for k, v := range props {
		if k != NotBeforeProperty {
			h[k] = v
		}
	}
	return h
}

// messageUUID is the Watermill UUID of a received message: UUIDProperty,
// else "ce-id", else the Pulsar message id.
func messageUUID(msg pulsarclient.Message) string {
	props := msg.Properties()
	if id := props[UUIDProperty]; id != "" {
		return id
	}
	if id := props[ports.HeaderID]; id != "" {
		return id
	}
	return msg.ID().String()
}
