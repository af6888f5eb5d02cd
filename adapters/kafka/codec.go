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

// HeaderNotBefore (kit.HeaderNotBefore) carries the earliest delivery time
// of a delayed message; it is removed from a Delivery's headers.
const HeaderNotBefore = kit.HeaderNotBefore

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

// decode reads a record of p; a malformed redelivery count is Record.Err
// (poison). BrokerID is "kafka:<physical topic>/<partition>/<offset>".
func decode(cm *sarama.ConsumerMessage, topic ports.Topic, p *partition, now time.Time) driver.Record {
	// The key and the header values are slices of one string, the header
	// names interned per partition.
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
			h[p.intern(rh.Key)], all = all[:len(rh.Value)], all[len(rh.Value):]
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

// intern returns b as a string, the same one for the same name (up to 256
// names per partition). Only ReceiveBatch calls it.
func (p *partition) intern(b []byte) string {
	if s, ok := p.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if p.names == nil {
		p.names = map[string]string{}
	}
	if len(p.names) < 256 {
		p.names[s] = s
	}
	return s
}
