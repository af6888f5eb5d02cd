package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// HeaderNotBefore (kit.HeaderNotBefore) is a delayed message's due time.
const HeaderNotBefore = kit.HeaderNotBefore

// record converts m (kafkawire.Record, from free when not nil), refuses
// it above MaxMessageBytes as sarama counts a record, and creates its
// topic if need be.
func (c *conn) record(ctx context.Context, m *ports.Message, free *kafkawire.Records) (*kgo.Record, error) {
	r, envelope := kafkawire.Record(c.topic(m.Topic), m, &c.payloads, free)
	err := m.CheckSize(c.opts.MaxMessageBytes, envelope)
	if err == nil {
		err = c.ensureTopic(ctx, r.Topic)
	}
	return r, err
}

// decode reads a record of p (kafkawire.Decode, or DecodeLazy when lazy)
// and adds the generation and member facts, on a decode worker.
func decode(kr *kgo.Record, topic ports.Topic, p *claim, now time.Time, lazy bool) driver.Record {
	if lazy {
		if r, ok := kafkawire.DecodeLazy(&p.dec, topic, kr, &p.facts, 0); ok {
			r.ReceivedAt = now
			return r
		}
	}
	r := kafkawire.Decode(&p.dec, topic, kafkawire.Fields{Topic: p.topic, Partition: p.id, Offset: kr.Offset, Key: kr.Key, Value: kr.Value,
		Timestamp: kr.Timestamp, Member: p.facts}, kr.Headers, kafkawire.FranzHeader)
	r.ReceivedAt = now
	return r
}
