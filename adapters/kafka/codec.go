package kafka

import (
	"context"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// HeaderNotBefore (kit.HeaderNotBefore) is a delayed message's due time.
const HeaderNotBefore = kit.HeaderNotBefore

// producerMessage converts m, its payload and headers copied (kit.Packed),
// and creates its topic if need be.
// One above MaxMessageBytes as sarama counts it (envelope too) is refused.
func (c *conn) producerMessage(ctx context.Context, m *ports.Message) (*sarama.ProducerMessage, error) {
	hs := make([]sarama.RecordHeader, 0, len(m.Headers))
	value := kit.Packed(m, func(k, v []byte) { hs = append(hs, sarama.RecordHeader{Key: k, Value: v}) })
	pm := &sarama.ProducerMessage{Topic: c.topic(m.Topic), Value: sarama.ByteEncoder(value), Headers: hs}
	if m.Key != "" {
		pm.Key = sarama.StringEncoder(m.Key)
	}
	err := m.CheckSize(c.opts.MaxMessageBytes, pm.ByteSize(2)-len(m.Payload))
	if err == nil {
		err = c.ensureTopic(ctx, pm.Topic)
	}
	return pm, err
}

// decode reads a record of p (kafkawire.Decode) and adds the generation
// and member facts. Only ReceiveBatch calls it.
func decode(cm *sarama.ConsumerMessage, topic ports.Topic, p *claim, now time.Time) driver.Record {
	r := kafkawire.Decode(&p.dec, topic, kafkawire.Fields{Topic: p.topic, Partition: p.id, Offset: cm.Offset, Key: cm.Key, Value: cm.Value,
		Timestamp: cm.Timestamp, Member: kafkawire.MemberFacts{Generation: p.genText, Member: p.member}}, cm.Headers, saramaHeader)
	r.ReceivedAt = now
	return r
}

// saramaHeader reads a header for kafkawire.Decode, passing over a nil one.
func saramaHeader(h *sarama.RecordHeader, names *kit.Names) (string, []byte, bool) {
	if h == nil {
		return "", nil, false
	}
	return names.Intern(h.Key), h.Value, true
}
