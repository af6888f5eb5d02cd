package mqtt

import (
	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// headerDeliverAt is earlier versions' kit.HeaderNotBefore, read as it.
const headerDeliverAt = "sluice-deliver-at"

// toPublish builds the QoS 1 PUBLISH of m, headers as user properties.
func toPublish(topic string, m *ports.Message) *paho.Publish {
	props := make([]paho.UserProperty, 0, len(m.Headers))
	for k, v := range m.Headers {
		props = append(props, paho.UserProperty{Key: k, Value: v})
	}
	return &paho.Publish{QoS: 1, Topic: topic, Payload: m.Payload,
		Properties: &paho.PublishProperties{User: props, ContentType: m.Headers[ports.HeaderContentType]}}
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
	h := make(ports.Headers, len(p.Properties.User)+1)
	for _, u := range p.Properties.User {
		h[u.Key] = u.Value
	}
	if ct := p.Properties.ContentType; ct != "" && h[ports.HeaderContentType] == "" {
		h[ports.HeaderContentType] = ct
	}
	if at, ok := h[headerDeliverAt]; ok {
		delete(h, headerDeliverAt)
		h[kit.HeaderNotBefore] = at
	}
	return h
}
