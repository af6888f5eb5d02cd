package wmbridge

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/ports"
)

// Message is the Watermill message of an envelope, the other way of
// Messages: id is its UUID (a new one when empty), headers its metadata.
// It is exported for adapters whose Watermill interop decodes the broker's
// messages itself (a watermill-amqp Marshaler).
func Message(id string, payload []byte, headers ports.Headers) *message.Message {
	if id == "" {
		id = ports.NewID()
	}
	msg := message.NewMessage(id, payload)
	for _, x := range headers {
		msg.Metadata[x.Name] = x.Value
	}
	return msg
}
