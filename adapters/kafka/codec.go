package kafka

import (
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// HeaderNotBefore carries the earliest delivery time of a delayed message
// or a delayed requeue (the name is kit.HeaderNotBefore; the portable
// layer writes it and holds the record on the consuming side until then).
// It is removed from a Delivery's headers.
const HeaderNotBefore = kit.HeaderNotBefore

// producerMessage encodes m, stamped, for the physical topic phys.
func producerMessage(phys string, m *ports.Message) *sarama.ProducerMessage {
	hs := make([]sarama.RecordHeader, 0, len(m.Headers))
	for k, v := range m.Headers {
		hs = append(hs, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	pm := &sarama.ProducerMessage{Topic: phys, Value: sarama.ByteEncoder(m.Payload), Headers: hs}
	if m.Key != "" {
		pm.Key = sarama.StringEncoder(m.Key)
	}
	return pm
}

// decode reads a consumed record of partition p. It never fails: a
// malformed redelivery count is reported in Record.Err (poison), the
// record still delivered. Its BrokerID is "kafka:<topic>/<partition>/<offset>"
// (the physical topic), the same on every redelivery of the record.
func decode(cm *sarama.ConsumerMessage, topic ports.Topic, p *partition, now time.Time) driver.Record {
	// The key and the header values are slices of one string: one
	// allocation instead of one each.
	n := len(cm.Key)
	for _, rh := range cm.Headers {
		if rh != nil {
			n += len(rh.Value)
		}
	}
	var b strings.Builder
	b.Grow(n)
	b.Write(cm.Key)
	for _, rh := range cm.Headers {
		if rh != nil {
			b.Write(rh.Value)
		}
	}
	all := b.String()
	key, all := all[:len(cm.Key)], all[len(cm.Key):]
	h := make(ports.Headers, len(cm.Headers))
	for _, rh := range cm.Headers {
		if rh != nil {
			h[string(rh.Key)], all = all[:len(rh.Value)], all[len(rh.Value):]
		}
	}
	off := strconv.FormatInt(cm.Offset, 10)
	facts := map[string]string{"topic": p.topic, "partition": p.idText, "offset": off, "generation": p.genText, "member": p.member}
	if !cm.Timestamp.IsZero() {
		facts["timestamp"] = cm.Timestamp.UTC().Format(time.RFC3339Nano)
	}
	r := driver.Record{
		Message:    ports.Message{Topic: topic, Key: key, Payload: cm.Value, Headers: h},
		BrokerID:   "kafka:" + p.topic + "/" + p.idText + "/" + off,
		Facts:      facts,
		ReceivedAt: now,
	}
	if _, err := ports.RedeliveryCountFrom(h); err != nil {
		r.Err = err
		facts["header-error"] = err.Error()
	}
	return r
}
