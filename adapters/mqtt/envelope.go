package mqtt

import (
	"strconv"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/ports"
)

// HeaderDeliverAt carries a delayed message's due time (Unix milliseconds,
// publisher clock). The consumer's local scheduler holds the message until
// then. It is private to this adapter's wire format.
const HeaderDeliverAt = "sluice-deliver-at"

// toPublish builds the QoS 1 PUBLISH of a stamped message. Headers travel
// as MQTT 5 user properties, unchanged.
func toPublish(topic string, m *ports.Message, deliverAt time.Time) *paho.Publish {
	props := make([]paho.UserProperty, 0, len(m.Headers)+1)
	for k, v := range m.Headers {
		if k == HeaderDeliverAt {
			continue
		}
		props = append(props, paho.UserProperty{Key: k, Value: v})
	}
	if !deliverAt.IsZero() {
		props = append(props, paho.UserProperty{Key: HeaderDeliverAt, Value: strconv.FormatInt(deliverAt.UnixMilli(), 10)})
	}
	p := &paho.Publish{QoS: 1, Topic: topic, Payload: m.Payload, Properties: &paho.PublishProperties{User: props}}
	if ct := m.Headers[ports.HeaderContentType]; ct != "" {
		p.Properties.ContentType = ct
	}
	return p
}

// headersOf returns a PUBLISH's user properties as headers. A repeated key
// keeps its last value. The MQTT 5 content-type property, which a producer
// without sluice's envelope may set instead, is the content-type header
// when the user properties have none.
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
	return h
}

// deliverAtOf parses HeaderDeliverAt: zero when absent, a *ports.HeaderError
// when malformed.
func deliverAtOf(h ports.Headers) (time.Time, error) {
	s, ok := h[HeaderDeliverAt]
	if !ok || s == "" {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms < 0 {
		return time.Time{}, &ports.HeaderError{Header: HeaderDeliverAt, Value: s}
	}
	return time.UnixMilli(ms), nil
}
