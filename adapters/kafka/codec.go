package kafka

import (
	"context"
	"encoding/binary"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// HeaderNotBefore (kit.HeaderNotBefore) is a delayed message's due time.
const HeaderNotBefore = kit.HeaderNotBefore

// record converts m, its payload and headers copied (kit.Packed; a header
// key is a string over its copy, which nothing writes), and creates its
// topic if need be. One above MaxMessageBytes as sarama counts a record
// (ProducerMessage.ByteSize: overhead, key, headers, payload) is refused.
func (c *conn) record(ctx context.Context, m *ports.Message) (*kgo.Record, error) {
	var r *kgo.Record
	if len(m.Headers) <= len(recordWithHeaders{}.hs) { // the record and its header list in one allocation
		rh := new(recordWithHeaders)
		r = &rh.r
		r.Headers = rh.hs[:0]
	} else {
		r = &kgo.Record{Headers: make([]kgo.RecordHeader, 0, len(m.Headers))}
	}
	r.Topic = c.topic(m.Topic)
	envelope := 5*binary.MaxVarintLen32 + binary.MaxVarintLen64 + 1 + len(m.Key)
	r.Value = kit.Packed(m, func(k, v []byte) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: unsafe.String(unsafe.SliceData(k), len(k)), Value: v})
		envelope += len(k) + len(v) + 2*binary.MaxVarintLen32
	})
	if m.Key != "" {
		r.Key = []byte(m.Key)
	}
	err := m.CheckSize(c.opts.MaxMessageBytes, envelope)
	if err == nil {
		err = c.ensureTopic(ctx, r.Topic)
	}
	return r, err
}

// recordWithHeaders is a record with room for the envelope's headers
// (type, content type, id, time, spec version, partition key, causation
// and correlation ids).
type recordWithHeaders struct {
	r  kgo.Record
	hs [8]kgo.RecordHeader
}

// decode reads a record of p (kafkawire.Decode) and adds the generation
// and member facts. Only the poll loop calls it.
func decode(kr *kgo.Record, topic ports.Topic, p *claim, now time.Time) driver.Record {
	r := kafkawire.Decode(&p.dec, topic, kafkawire.Fields{Topic: p.topic, Partition: p.id, Offset: kr.Offset, Key: kr.Key, Value: kr.Value,
		Timestamp: kr.Timestamp, Member: kafkawire.MemberFacts{Generation: p.genText, Member: p.member}}, kr.Headers, kafkawire.FranzHeader)
	r.ReceivedAt = now
	return r
}
