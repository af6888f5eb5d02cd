package redis

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

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

// decode builds a delivery from an entry's values. deliveries is the
// entry's times_delivered (1 on the first delivery). fields is nil for an
// entry in sluice's or watermill's format, and the data fields of a plain
// producer's field/value entry (see dataFields), whose payload is then
// their JSON object.
func decode(topic ports.Topic, stream, group, id string, values map[string]any, deliveries int64) (d *ports.Delivery, fields []any) {
	d = &ports.Delivery{Facts: map[string]string{"stream": stream, "group": group, "entry": id}}
	d.Topic = topic
	h := make(ports.Headers, len(values))
	for k, v := range values {
		s, _ := v.(string)
		switch {
		case k == fieldPayload:
			d.Payload = []byte(s)
		case k == fieldKey:
			d.Key = s
		case strings.HasPrefix(k, headerPrefix):
			h[k[len(headerPrefix):]] = s
		}
	}
	uuid, watermill := values[fieldWatermillUUID].(string)
	if _, ok := values[fieldPayload]; !ok && !watermill {
		fields, d.Payload = dataFields(values)
		d.Key = h[ports.HeaderPartitionKey] // a "key" field is data here
		d.Facts[FactFormat] = "fields"
	}
	if watermill {
		// watermill-redisstream format: metadata are the headers.
		if raw, _ := values[fieldWatermillMeta].(string); raw != "" {
			meta, err := unmsgpackMap([]byte(raw))
			if err != nil {
				d.Err = ports.Poison(fmt.Errorf("redis stream %s entry %s: watermill metadata: %w", stream, id, err))
			}
			for k, v := range meta {
				h[k] = v
			}
		}
		if h[ports.HeaderID] == "" {
			h[ports.HeaderID] = uuid
		}
		if d.Key == "" {
			d.Key = h[ports.HeaderPartitionKey]
		}
	}
	d.Headers = h
	if d.ID, d.IDSource = ports.IdentityFromHeaders(h); d.ID == "" {
		d.ID, d.IDSource = "redis:"+stream+":"+id, ports.IDBroker
	}
	if deliveries < 1 {
		deliveries = 1
	}
	copies, err := ports.RedeliveryCountFrom(h)
	if err != nil {
		d.Err = err
	}
	d.RedeliveryCount = copies + int(deliveries) - 1
	d.Facts["times_delivered"] = strconv.FormatInt(deliveries, 10)
	if _, ok := values[fieldPayload]; !ok && watermill && d.Err == nil {
		d.Err = ports.Poison(fmt.Errorf("redis stream %s entry %s: watermill entry has no %q field", stream, id, fieldPayload))
	}
	return d, fields
}
