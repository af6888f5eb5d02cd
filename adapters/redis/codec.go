package redis

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

type atomicBool = atomic.Bool

// Stream entry fields. An entry is flat: the payload, the partition key,
// and one field per header with the prefix "h:". Fields the adapter does
// not know are ignored (so other producers' extra fields do no harm). An
// entry without a "payload" field is a plain producer's field/value entry
// (fields.go).
const (
	fieldPayload = "payload"
	fieldKey     = "key"
	headerPrefix = "h:"
	fieldStream  = "__stream" // only in a delayed message's hash
)

// The watermill-redisstream wire format (github.com/ThreeDotsLabs/
// watermill-redisstream, DefaultMarshallerUnmarshaller): the message UUID,
// the metadata as a MessagePack map, the payload.
const (
	fieldWatermillUUID = "_watermill_message_uuid"
	fieldWatermillMeta = "metadata"
)

// Wire is the entry format Send writes. Both formats are read, whatever
// Wire says.
type Wire int

const (
	// WireSluice: "payload", "key" and one "h:<name>" field per header
	// (readable with redis-cli). The default.
	WireSluice Wire = iota
	// WireWatermill: watermill-redisstream's format — "_watermill_message_uuid"
	// (the message id), "metadata" (every header, MessagePack) and
	// "payload" — so watermill-redisstream subscribers read what this
	// adapter sends. The partition key travels as the ce-partitionkey
	// header.
	WireWatermill
)

func encodeFor(w Wire, m *ports.Message) []any {
	if w == WireWatermill {
		return encodeWatermill(m)
	}
	return encode(m)
}

func encodeWatermill(m *ports.Message) []any {
	meta := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		meta[k] = v
	}
	return []any{fieldWatermillUUID, m.Headers[ports.HeaderID], fieldWatermillMeta, msgpackMap(meta), fieldPayload, m.Payload}
}

// encode returns the XADD field/value list of m in the sluice format.
func encode(m *ports.Message) []any {
	out := make([]any, 0, 4+2*len(m.Headers))
	out = append(out, fieldPayload, m.Payload)
	if m.Key != "" {
		out = append(out, fieldKey, m.Key)
	}
	for k, v := range m.Headers {
		out = append(out, headerPrefix+k, v)
	}
	return out
}

// decode builds a record from an entry's values. deliveries is the
// entry's times_delivered (1 on the first delivery). fields is nil for an
// entry in sluice's or watermill's format, and the data fields of a plain
// producer's field/value entry (see dataFields), whose payload is then
// their JSON object.
func decode(stream, group, id string, values map[string]any, deliveries int64) (r driver.Record, fields []any) {
	r = driver.Record{BrokerID: "redis:" + stream + ":" + id, Facts: map[string]string{"stream": stream, "group": group, "entry": id}}
	m := &r.Message
	h := make(ports.Headers, len(values))
	for k, v := range values {
		s, _ := v.(string)
		switch {
		case k == fieldPayload:
			m.Payload = []byte(s)
		case k == fieldKey:
			m.Key = s
		case strings.HasPrefix(k, headerPrefix):
			h[k[len(headerPrefix):]] = s
		}
	}
	uuid, watermill := values[fieldWatermillUUID].(string)
	if _, ok := values[fieldPayload]; !ok && !watermill {
		fields, m.Payload = dataFields(values)
		m.Key = h[ports.HeaderPartitionKey] // a "key" field is data here
		r.Facts[FactFormat] = "fields"
	}
	if watermill {
		// watermill-redisstream format: metadata are the headers.
		if raw, _ := values[fieldWatermillMeta].(string); raw != "" {
			meta, err := unmsgpackMap([]byte(raw))
			if err != nil {
				r.Err = ports.Poison(fmt.Errorf("redis stream %s entry %s: watermill metadata: %w", stream, id, err))
			}
			for k, v := range meta {
				h[k] = v
			}
		}
		if h[ports.HeaderID] == "" {
			h[ports.HeaderID] = uuid
		}
		if m.Key == "" {
			m.Key = h[ports.HeaderPartitionKey]
		}
		if _, ok := values[fieldPayload]; !ok && r.Err == nil {
			r.Err = ports.Poison(fmt.Errorf("redis stream %s entry %s: watermill entry has no %q field", stream, id, fieldPayload))
		}
	}
	m.Headers = h
	deliveries = max(deliveries, 1)
	// A copy that went through the delayed set (a long requeue) carries
	// the count of the deliveries before it.
	copies, err := ports.RedeliveryCountFrom(h)
	if err != nil && r.Err == nil {
		r.Err = err
	}
	r.RedeliveryCount = copies + int(deliveries) - 1
	r.Facts["times_delivered"] = strconv.FormatInt(deliveries, 10)
	return r, fields
}
