package kafkawire

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Fields are what Decode reads of a Kafka record besides its headers.
type Fields struct {
	Topic      string // physical
	Partition  int32
	Offset     int64
	Key, Value []byte
	Timestamp  time.Time
	// Member is what the consumer adds to the record's facts.
	Member MemberFacts
}

// MemberFacts are the consumer's own facts on a record: a consumer
// group's generation and member id (kafka), or a share group and the
// record's delivery count (kafkaqueue). Empty ones (a zero count) are left
// out.
type MemberFacts struct {
	Generation, Member string
	ShareGroup         string
	DeliveryCount      int
}

// Decoder holds what Decode reuses from one record to the next: one per
// partition or subscription, not safe for concurrent use. The zero value
// is ready.
type Decoder struct {
	names   kit.Names
	hs      []named
	buf     []byte
	facts   []facts        // carved one a record, a chunk at a time
	headers []ports.Header // carved a record's at a time
	lazy    []lazy         // carved one a record (DecodeLazy)
}

// factsChunk is how many records' facts one allocation holds,
// headersChunk how many headers.
const (
	factsChunk   = 32
	headersChunk = 256
)

// facts are a record's facts (a ports.FactSource): slices of Decode's
// string and the consumer's, walked only when read (the timestamp
// formatted then).
type facts struct {
	topic, partition, offset string
	timestamp                time.Time
	member                   MemberFacts
	headerError              error
}

// factNames name facts' strings, in the order Facts yields them.
var factNames = [...]string{"topic", "partition", "offset", "timestamp", "generation", "member", "share-group"}

// Facts yields the non-empty facts: topic, partition, offset, timestamp,
// generation, member, share-group, delivery-count, header-error.
func (f *facts) Facts(yield func(key, value string) bool) {
	var ts string
	if !f.timestamp.IsZero() {
		ts = f.timestamp.UTC().Format(time.RFC3339Nano)
	}
	for i, v := range [...]string{f.topic, f.partition, f.offset, ts, f.member.Generation, f.member.Member, f.member.ShareGroup} {
		if v != "" && !yield(factNames[i], v) {
			return
		}
	}
	if f.member.DeliveryCount != 0 && !yield("delivery-count", strconv.Itoa(f.member.DeliveryCount)) {
		return
	}
	if f.headerError != nil {
		yield("header-error", f.headerError.Error())
	}
}

// named is a header's name and where its value ends in the buffer.
type named struct {
	name string
	end  int
}

// headers fills h with the headers whose names ends holds and whose values
// are the slices of all between one end and the next, from at; a repeated
// name keeps its last value (Kafka allows repeats).
func headers(h ports.Headers, ends []named, all string, at int) ports.Headers {
	n := 0
next:
	for _, e := range ends {
		v := all[at:e.end]
		at = e.end
		for i := range h[:n] {
			if h[i].Name == e.name {
				h[i].Value = v
				continue next
			}
		}
		h[n] = ports.Header{Name: e.name, Value: v}
		n++
	}
	return h[:n:n]
}

// Decode maps a Kafka record of logical topic t onto a driver.Record alike
// for every Kafka adapter: value → payload, key → partition key, headers
// (hs, each read by read, which returns ok false for one to pass over) →
// envelope; BrokerID is "kafka:<topic>/<partition>/<offset>"; the facts
// are topic, partition, offset, timestamp and f.Member's; a malformed
// redelivery count is Record.Err (poison) and the fact header-error. The
// key, the header values and the BrokerID (the partition and offset facts
// its parts) are slices of one string built in d; header names are what read returns (interned in names where the
// client has bytes). Neither the headers nor the facts are a map: the
// headers are a slice and the facts a struct, each carved from a chunk that
// consecutive records share; the facts are walked only when read.
func Decode[H any](d *Decoder, t ports.Topic, f Fields, hs []H, read func(h H, names *kit.Names) (name string, value []byte, ok bool)) driver.Record {
	b, ends := append(d.buf[:0], f.Key...), d.hs[:0]
	for _, x := range hs {
		if name, v, ok := read(x, &d.names); ok {
			b = append(b, v...)
			ends = append(ends, named{name: name, end: len(b)})
		}
	}
	id := len(b)
	b = append(append(b, "kafka:"...), f.Topic...)
	part := len(b) + 1
	b = strconv.AppendInt(append(b, '/'), int64(f.Partition), 10)
	off := len(b) + 1
	b = strconv.AppendInt(append(b, '/'), f.Offset, 10)
	d.buf, d.hs = b, ends
	all := string(b)
	var h ports.Headers
	if len(ends) > 0 {
		h = headers(kit.Carve(&d.headers, len(ends), headersChunk), ends, all, len(f.Key))
	}
	fs := &kit.Carve(&d.facts, 1, factsChunk)[0]
	*fs = facts{topic: f.Topic, partition: all[part : off-1], offset: all[off:], timestamp: f.Timestamp, member: f.Member}
	r := driver.Record{Message: ports.Message{Topic: t, Key: all[:len(f.Key)], Payload: f.Value, Headers: h}, BrokerID: all[id:], Facts: ports.NewFacts(fs)}
	if _, err := ports.RedeliveryCountFrom(h); err != nil {
		r.Err, fs.headerError = err, err
	}
	return r
}

// FranzHeader reads a franz-go record header for Decode.
func FranzHeader(h kgo.RecordHeader, _ *kit.Names) (string, []byte, bool) {
	return h.Key, h.Value, true
}
