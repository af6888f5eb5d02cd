package mqtt

import (
	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// headerDeliverAt is earlier versions' kit.HeaderNotBefore, read as it.
const headerDeliverAt = "sluice-deliver-at"

// toPublish builds the QoS 1 PUBLISH of m: the content type as the MQTT 5
// content-type property (headersOf reads it back), every other header as
// a user property.
func toPublish(topic string, m *ports.Message) *paho.Publish {
	props := make([]paho.UserProperty, 0, len(m.Headers))
	var contentType string
	for _, h := range m.Headers {
		if h.Name == ports.HeaderContentType {
			contentType = h.Value
			continue
		}
		props = append(props, paho.UserProperty{Key: h.Name, Value: h.Value})
	}
	return &paho.Publish{QoS: 1, Topic: topic, Payload: m.Payload,
		Properties: &paho.PublishProperties{User: props, ContentType: contentType}}
}

// envelopeBytes is a PUBLISH's size besides its payload, at its largest.
func envelopeBytes(p *paho.Publish) int {
	n := 5 + 2 + len(p.Topic) + 2 + 4
	for _, u := range p.Properties.User {
		n += 1 + 2 + len(u.Key) + 2 + len(u.Value)
	}
	if p.Properties.ContentType != "" {
		n += 1 + 2 + len(p.Properties.ContentType)
	}
	if p.Properties.MessageExpiry != nil {
		n += 5
	}
	return n
}

// headersOf returns the user properties of p, a received PUBLISH, as
// headers (a repeated key keeps its last value), and the content-type
// property when they have none.
func headersOf(p *paho.Publish) ports.Headers {
	h := make(ports.Headers, 0, len(p.Properties.User)+1)
	for _, u := range p.Properties.User {
		h.Set(u.Key, u.Value)
	}
	if ct := p.Properties.ContentType; ct != "" && h.Get(ports.HeaderContentType) == "" {
		h.Set(ports.HeaderContentType, ct)
	}
	if at, ok := h.Lookup(headerDeliverAt); ok {
		h.Del(headerDeliverAt)
		h.Set(kit.HeaderNotBefore, at)
	}
	return h
}
