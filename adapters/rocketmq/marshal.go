package rocketmq

import (
	"maps"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/ports"
)

// Fact names a delivery carries in Delivery.Facts.
const (
	FactMessageID       = "rocketmq.message-id"
	FactGroup           = "rocketmq.group"
	FactDeliveryAttempt = "rocketmq.delivery-attempt"
)

// toRocketMQ maps a stamped message: headers become user properties, the
// key the message's (first) key, Delay the delivery timestamp.
func (a *Adapter) toRocketMQ(m *ports.Message, now time.Time) (*rmq.Message, error) {
	topic, err := a.topicName(m.Topic)
	if err != nil {
		return nil, err
	}
	rm := &rmq.Message{Topic: topic, Body: m.Payload}
	for k, v := range m.Headers {
		rm.AddProperty(k, v)
	}
	if m.Key != "" {
		rm.SetKeys(m.Key)
	}
	if m.Delay > 0 {
		rm.SetDelayTimestamp(now.Add(m.Delay))
	}
	return rm, nil
}

// headersOf copies a received message's user properties.
func headersOf(mv *rmq.MessageView) ports.Headers {
	p := mv.GetProperties()
	h := make(ports.Headers, len(p))
	maps.Copy(h, p)
	return h
}

func keyOf(mv *rmq.MessageView) string {
	if k := mv.GetKeys(); len(k) > 0 {
		return k[0]
	}
	return ""
}
