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
func decode(cm *sarama.ConsumerMessage, topic ports.Topic, p *claim, now time.Time) driver.Record {
	// The key, the header values, the timestamp fact and the BrokerID (the
	// offset fact its tail) are slices of one string; header names are
	// interned per partition.
	var tsBuf [40]byte
	var ts []byte
	if !cm.Timestamp.IsZero() {
		ts = cm.Timestamp.UTC().AppendFormat(tsBuf[:0], time.RFC3339Nano)
	}
	var offBuf [20]byte
	off := strconv.AppendInt(offBuf[:0], cm.Offset, 10)
	n := len(cm.Key) + len(ts) + len("kafka:/") + len(p.topic) + len(p.idText) + 1 + len(off)
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
	b.Write(ts)
	b.WriteString("kafka:")
	b.WriteString(p.topic)
	b.WriteByte('/')
	b.WriteString(p.idText)
	b.WriteByte('/')
	b.Write(off)
	all := b.String()
	key, all := all[:len(cm.Key)], all[len(cm.Key):]
	h := make(ports.Headers, len(cm.Headers))
	for _, rh := range cm.Headers {
		if rh != nil {
			h[p.intern(rh.Key)], all = all[:len(rh.Value)], all[len(rh.Value):]
		}
	}
	id := all[len(ts):]
	facts := map[string]string{"topic": p.topic, "partition": p.idText, "offset": id[len(id)-len(off):], "generation": p.genText, "member": p.member}
	if len(ts) > 0 {
		facts["timestamp"] = all[:len(ts)]
	}
	r := driver.Record{Message: ports.Message{Topic: topic, Key: key, Payload: cm.Value, Headers: h}, BrokerID: id, Facts: facts, ReceivedAt: now}
	if _, err := ports.RedeliveryCountFrom(h); err != nil {
		r.Err = err
		facts["header-error"] = err.Error()
	}
	return r
}

// intern returns b as a string, the same one for the same name (up to 256
// names per partition). Only ReceiveBatch calls it.
func (p *claim) intern(b []byte) string {
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
