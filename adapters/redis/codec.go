package redis

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/vmihailenco/msgpack"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// Stream entry fields. sluice's format: the payload, the key, one "h:"
// field per header. watermill-redisstream's: the message UUID, the
// metadata as a MessagePack map, the payload. An entry with neither is a
// plain producer's field/value entry.
const (
	fieldPayload       = "payload"
	fieldKey           = "key"
	headerPrefix       = "h:"
	fieldWatermillUUID = "_watermill_message_uuid"
	fieldWatermillMeta = "metadata"
)

// Wire is the entry format Send writes. Both formats are read.
type Wire int

const (
	// WireSluice: "payload", "key" and one "h:<name>" field per header
	// (readable with redis-cli). The default.
	WireSluice Wire = iota
	// WireWatermill: watermill-redisstream's format, for its subscribers;
	// the partition key travels as the ce-partitionkey header.
	WireWatermill
)

// FactFormat is the Delivery fact naming an entry's format: "fields" for a
// field/value entry mapped to a JSON payload.
const FactFormat = "format"

// encodeFor appends the XADD field/value list of m in format w to out.
func encodeFor(out []any, w Wire, m *ports.Message) []any {
	if w == WireWatermill {
		meta, _ := msgpack.Marshal(m.Headers.Map()) // a map of strings always encodes
		return append(out, fieldWatermillUUID, m.Headers.Get(ports.HeaderID), fieldWatermillMeta, meta, fieldPayload, m.Payload)
	}
	out = append(out, fieldPayload, m.Payload)
	if m.Key != "" {
		out = append(out, fieldKey, m.Key)
	}
	return appendHeaders(out, m)
}

// appendHeaders appends one "h:<name>" field per header of m: the names
// and values as *string, which go-redis writes as the string, pointing
// into one slice, not one allocation per interface value, and the names'
// bytes in one allocation, not one per name.
func appendHeaders(out []any, m *ports.Message) []any {
	// strs never grows (out points into it); names may: no byte under a string is written again
	names, strs := make([]byte, 0, 24*len(m.Headers)), make([]string, 0, 2*len(m.Headers))
	for _, h := range m.Headers {
		at := len(names)
		names = append(append(names, headerPrefix...), h.Name...)
		strs = append(strs, unsafe.String(&names[at], len(names)-at), h.Value)
		out = append(out, &strs[len(strs)-2], &strs[len(strs)-1])
	}
	return out
}

// decode builds the record of an entry delivered deliveries times, its
// facts in f (the held entry's own: one allocation fewer per entry).
// fields is the data of a field/value entry, else nil. The payload is the
// bytes go-redis read its string into (memory only values shares; a
// delivery's payload is read-only), not a copy. The broker's identity is
// left out when the entry carries the producer's (the rule would not use it).
func decode(f *entryFacts, stream, group, id string, values map[string]any, deliveries int64) (r driver.Record, fields []any) {
	*f = entryFacts{stream: stream, group: group, entry: id}
	r = driver.Record{Facts: ports.NewFacts(f)}
	m := &r.Message
	h := make(ports.Headers, 0, len(values))
	for k, v := range values {
		s, _ := v.(string)
		switch {
		case k == fieldPayload:
			m.Payload = unsafe.Slice(unsafe.StringData(s), len(s))
		case k == fieldKey:
			m.Key = s
		case strings.HasPrefix(k, headerPrefix):
			h.Set(k[len(headerPrefix):], s)
		}
	}
	_, hasPayload := values[fieldPayload]
	var poison error
	switch uuid, watermill := values[fieldWatermillUUID].(string); {
	case watermill:
		var meta map[string]string
		if raw, _ := values[fieldWatermillMeta].(string); raw != "" {
			if err := msgpack.Unmarshal([]byte(raw), &meta); err != nil {
				poison = fmt.Errorf("watermill metadata: %w", err)
			}
		}
		for k, v := range meta {
			h.Set(k, v)
		}
		h.Set(ports.HeaderID, cmp.Or(h.Get(ports.HeaderID), uuid))
		m.Key = cmp.Or(m.Key, h.Get(ports.HeaderPartitionKey))
		if !hasPayload {
			poison = cmp.Or(poison, fmt.Errorf("watermill entry has no %q field", fieldPayload))
		}
	case !hasPayload:
		fields, m.Payload = dataFields(values)
		m.Key = h.Get(ports.HeaderPartitionKey) // a "key" field is data here
		f.fields = true
	}
	m.Headers = h
	if h.Get(ports.HeaderID) == "" {
		r.BrokerID = "redis:" + stream + ":" + id
	}
	copies, err := ports.RedeliveryCountFrom(h) // a counted copy written by an earlier version
	r.Err = err
	if poison != nil {
		r.Err = ports.Poison(fmt.Errorf("redis stream %s entry %s: %w", stream, id, poison))
	}
	deliveries = max(deliveries, 1)
	r.RedeliveryCount = copies + int(deliveries) - 1
	f.delivered = deliveries
	return r, fields
}

// entryFacts are an entry's facts (ports.FactSource).
type entryFacts struct {
	stream, group, entry string
	fields               bool // FactFormat "fields"
	delivered            int64
}

func (f *entryFacts) Facts(yield func(key, value string) bool) {
	_ = yield("stream", f.stream) && yield("group", f.group) && yield("entry", f.entry) &&
		(!f.fields || yield(FactFormat, "fields")) && yield("times_delivered", strconv.FormatInt(f.delivered, 10))
}

// A plain producer's field/value entry (redis-cli XADD s '*' id r-1) is
// delivered with its data fields as a compact JSON object of strings, keys
// in byte order: {"id":"r-1"}; "h:<name>" fields are headers. Its
// dead-letter copy, sent through SendBatch, keeps the original fields byte
// for byte: they are held in conn.fields under the delivery's identity.
func dataFields(values map[string]any) ([]any, []byte) {
	names := slices.Sorted(maps.Keys(values))
	obj, fields := make(map[string]string, len(names)), make([]any, 0, 2*len(names))
	for _, k := range names {
		if s, _ := values[k].(string); !strings.HasPrefix(k, headerPrefix) {
			obj[k], fields = s, append(fields, k, s)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(obj) // a map of strings always encodes; keys sorted
	return fields, bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// encodeSend appends the XADD list of m to a command's first arguments
// (one slice holds the command): for the dead-letter copy of a held
// field/value entry its fields and m's headers, else m in Wire's format.
func (c *conn) encodeSend(m *ports.Message, args ...any) []any {
	out := append(make([]any, 0, len(args)+6+2*len(m.Headers)), args...) // a watermill entry's 6, else payload, key, headers
	if _, dl := m.Topic.DeadLetterOf(); dl {
		if fields, ok := c.fields.Lookup(m.Headers.Get(ports.HeaderID)); ok {
			return appendHeaders(append(out, fields...), m)
		}
	}
	return encodeFor(out, c.o.Wire, m)
}
