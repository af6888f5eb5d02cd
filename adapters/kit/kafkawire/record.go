package kafkawire

import (
	"strconv"
	"time"

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
}

// Decoder holds what Decode reuses from one record to the next: one per
// partition or subscription, not safe for concurrent use. The zero value
// is ready.
type Decoder struct {
	names kit.Names
	hs    []named
	buf   []byte
}

// named is a header's name and where its value ends in the buffer.
type named struct {
	name string
	end  int
}

// Decode maps a Kafka record of logical topic t onto a driver.Record alike
// for every Kafka adapter: value → payload, key → partition key, headers
// (hs, each read by read, which returns ok false for one to pass over) →
// envelope; BrokerID is "kafka:<topic>/<partition>/<offset>"; the facts
// are topic, partition, offset and timestamp; a malformed redelivery count
// is Record.Err (poison) and the fact header-error. The key, the header
// values, the timestamp fact and the BrokerID (the partition and offset
// facts its parts) are slices of one string built in d; header names are
// what read returns (interned in names where the client has bytes).
func Decode[H any](d *Decoder, t ports.Topic, f Fields, hs []H, read func(h H, names *kit.Names) (name string, value []byte, ok bool)) driver.Record {
	b, ends := append(d.buf[:0], f.Key...), d.hs[:0]
	for _, x := range hs {
		if name, v, ok := read(x, &d.names); ok {
			b = append(b, v...)
			ends = append(ends, named{name: name, end: len(b)})
		}
	}
	ts := len(b)
	if !f.Timestamp.IsZero() {
		b = f.Timestamp.UTC().AppendFormat(b, time.RFC3339Nano)
	}
	id := len(b)
	b = append(append(b, "kafka:"...), f.Topic...)
	part := len(b) + 1
	b = strconv.AppendInt(append(b, '/'), int64(f.Partition), 10)
	off := len(b) + 1
	b = strconv.AppendInt(append(b, '/'), f.Offset, 10)
	d.buf, d.hs = b, ends
	all := string(b)
	h, at := make(ports.Headers, len(ends)), len(f.Key)
	for _, n := range ends {
		h[n.name], at = all[at:n.end], n.end
	}
	facts := make(map[string]string, 7)
	facts["topic"], facts["partition"], facts["offset"] = f.Topic, all[part:off-1], all[off:]
	if id > ts {
		facts["timestamp"] = all[ts:id]
	}
	r := driver.Record{Message: ports.Message{Topic: t, Key: all[:len(f.Key)], Payload: f.Value, Headers: h}, BrokerID: all[id:], Facts: facts}
	if _, err := ports.RedeliveryCountFrom(h); err != nil {
		r.Err = err
		facts["header-error"] = err.Error()
	}
	return r
}
