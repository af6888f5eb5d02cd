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
	p := &paho.Publish{QoS: 1, Topic: topic, Payload: m.Payload, Properties: &paho.PublishProperties{User: props}}
	if ct := m.Headers[ports.HeaderContentType]; ct != "" {
		p.Properties.ContentType = ct
	}
	return p
}

// headersOf returns p's user properties as headers (a repeated key keeps
// its last value), and the content-type property when they have none.
func headersOf(p *paho.Publish) ports.Headers {
	if p.Properties == nil {
		return ports.Headers{}
	}
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

// userProperty returns the last value of user property key of p.
func userProperty(p *paho.Publish, key string) string {
	v := ""
	if p.Properties != nil {
		for _, u := range p.Properties.User {
			if u.Key == key {
				v = u.Value
			}
		}
	}
	return v
}
