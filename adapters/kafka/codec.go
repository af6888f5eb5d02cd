package kafka

import (
	"context"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// HeaderNotBefore (kit.HeaderNotBefore) carries the earliest delivery time
// of a delayed message; it is removed from a Delivery's headers.
const HeaderNotBefore = kit.HeaderNotBefore

// producerMessage converts m and creates its topic if need be. A message
// larger than MaxMessageBytes as sarama counts it (record format 2,
// envelope included) is refused.
func (c *conn) producerMessage(ctx context.Context, m *ports.Message) (*sarama.ProducerMessage, error) {
	hs := make([]sarama.RecordHeader, 0, len(m.Headers))
	for k, v := range m.Headers {
		hs = append(hs, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	pm := &sarama.ProducerMessage{Topic: c.topic(m.Topic), Value: sarama.ByteEncoder(m.Payload), Headers: hs}
	if m.Key != "" {
		pm.Key = sarama.StringEncoder(m.Key)
	}
	err := m.CheckSize(c.opts.MaxMessageBytes, pm.ByteSize(2)-len(m.Payload))
	if err == nil {
		err = c.ensureTopic(ctx, pm.Topic)
	}
	return pm, err
}

// decode reads a record of p; a malformed redelivery count is Record.Err
// (poison). BrokerID is "kafka:<physical topic>/<partition>/<offset>".
// The key, the header values, the timestamp fact and the BrokerID (the
// offset fact its tail) are slices of one string built in p.buf; header
// names are interned per partition (kit.Names). Only ReceiveBatch calls it.
func decode(cm *sarama.ConsumerMessage, topic ports.Topic, p *claim, now time.Time) driver.Record {
	b := append(p.buf[:0], cm.Key...)
	for _, rh := range cm.Headers {
		if rh != nil {
			b = append(b, rh.Value...)
		}
	}
	ts := len(b)
	if !cm.Timestamp.IsZero() {
		b = cm.Timestamp.UTC().AppendFormat(b, time.RFC3339Nano)
	}
	id := len(b)
	b = append(b, "kafka:"...)
	b = append(b, p.topic...)
	b = append(b, '/')
	b = append(b, p.idText...)
	b = append(b, '/')
	off := len(b)
	b = strconv.AppendInt(b, cm.Offset, 10)
	p.buf = b
	all := string(b)
	h, at := make(ports.Headers, len(cm.Headers)), len(cm.Key)
	for _, rh := range cm.Headers {
		if rh != nil {
			h[p.names.Intern(rh.Key)], at = all[at:at+len(rh.Value)], at+len(rh.Value)
		}
	}
	facts := map[string]string{"topic": p.topic, "partition": p.idText, "offset": all[off:], "generation": p.genText, "member": p.member}
	if id > ts {
		facts["timestamp"] = all[ts:id]
	}
	r := driver.Record{Message: ports.Message{Topic: topic, Key: all[:len(cm.Key)], Payload: cm.Value, Headers: h}, BrokerID: all[id:], Facts: facts, ReceivedAt: now}
	if _, err := ports.RedeliveryCountFrom(h); err != nil {
		r.Err = err
		facts["header-error"] = err.Error()
	}
	return r
}
