package kafka

import (
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// HeaderNotBefore carries the earliest delivery time of a delayed message
// or a delayed requeue, as RFC 3339 with nanoseconds (this adapter's wire
// form; the name is kit.HeaderNotBefore). It is private to this adapter:
// it is removed from a Delivery's headers.
const HeaderNotBefore = kit.HeaderNotBefore

// names derives physical topic and group names from logical ones.
// producerMessage encodes m for the physical topic phys. Headers must
// already be stamped. notBefore, when non-zero, is written as
// HeaderNotBefore.
func producerMessage(phys string, m *ports.Message, notBefore time.Time) *sarama.ProducerMessage {
	hs := make([]sarama.RecordHeader, 0, len(m.Headers)+1)
	for k, v := range m.Headers {
		if k == HeaderNotBefore {
			continue
		}
		hs = append(hs, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	if !notBefore.IsZero() {
		hs = append(hs, sarama.RecordHeader{Key: []byte(HeaderNotBefore), Value: []byte(notBefore.UTC().Format(time.RFC3339Nano))})
	}
	pm := &sarama.ProducerMessage{Topic: phys, Value: sarama.ByteEncoder(m.Payload), Headers: hs}
	if m.Key != "" {
		pm.Key = sarama.StringEncoder(m.Key)
	}
	return pm
}

// decoded is what the adapter reads from one consumed record.
type decoded struct {
	msg       ports.Message
	count     int       // HeaderRedeliveryCount, 0 when missing or malformed
	notBefore time.Time // zero when not delayed
	// bad is the first malformed adapter header (redelivery count or
	// not-before), nil when all are well formed.
	bad *ports.HeaderError
}

// decode reads a consumed record. It never fails: malformed headers are
// reported in decoded.bad and the record is still delivered, with
// Delivery.Err set so the core dead-letters it as poison.
func decode(cm *sarama.ConsumerMessage, topic ports.Topic) decoded {
	var d decoded
	h := make(ports.Headers, len(cm.Headers))
	for _, rh := range cm.Headers {
		if rh == nil {
			continue
		}
		h[string(rh.Key)] = string(rh.Value)
	}
	if s, ok := h[HeaderNotBefore]; ok {
		delete(h, HeaderNotBefore)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			d.bad = &ports.HeaderError{Header: HeaderNotBefore, Value: s}
		} else {
			d.notBefore = t
		}
	}
	n, err := ports.RedeliveryCountFrom(h)
	if err != nil && d.bad == nil {
		d.bad = &ports.HeaderError{Header: ports.HeaderRedeliveryCount, Value: h[ports.HeaderRedeliveryCount]}
	}
	d.count = n
	d.msg = ports.Message{Topic: topic, Key: string(cm.Key), Payload: cm.Value, Headers: h}
	return d
}
