package redis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// Stream entry fields. sluice's format is flat: the payload, the partition
// key, one field per header with the prefix "h:"; unknown fields are
// ignored. watermill-redisstream's (DefaultMarshallerUnmarshaller) is the
// message UUID, the metadata as a MessagePack map and the payload. An
// entry with neither is a plain producer's field/value entry (below).
const (
	fieldPayload       = "payload"
	fieldKey           = "key"
	headerPrefix       = "h:"
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
	// WireWatermill: watermill-redisstream's "_watermill_message_uuid"
	// (the message id), "metadata" (every header, MessagePack) and
	// "payload", so that its subscribers read what the adapter sends. The
	// partition key travels as the ce-partitionkey header.
	WireWatermill
)

// FactFormat is the Delivery fact naming an entry's format: "fields" for a
// field/value entry mapped to a JSON payload.
const FactFormat = "format"

// encodeFor returns the XADD field/value list of m in format w.
func encodeFor(w Wire, m *ports.Message) []any {
	if w == WireWatermill {
		meta := make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			meta[k] = v
		}
		return []any{fieldWatermillUUID, m.Headers[ports.HeaderID], fieldWatermillMeta, msgpackMap(meta), fieldPayload, m.Payload}
	}
	out := make([]any, 0, 4+2*len(m.Headers))
	out = append(out, fieldPayload, m.Payload)
	if m.Key != "" {
		out = append(out, fieldKey, m.Key)
	}
	return appendHeaders(out, m)
}

func appendHeaders(out []any, m *ports.Message) []any {
	for k, v := range m.Headers {
		out = append(out, headerPrefix+k, v)
	}
	return out
}

// decode builds the record of an entry. deliveries is its times_delivered
// (1 on the first delivery). fields is nil for sluice's and watermill's
// formats, and the data fields of a field/value entry.
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
	_, hasPayload := values[fieldPayload]
	uuid, watermill := values[fieldWatermillUUID].(string)
	switch {
	case watermill:
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
		if !hasPayload && r.Err == nil {
			r.Err = ports.Poison(fmt.Errorf("redis stream %s entry %s: watermill entry has no %q field", stream, id, fieldPayload))
		}
	case !hasPayload:
		fields, m.Payload = dataFields(values)
		m.Key = h[ports.HeaderPartitionKey] // a "key" field is data here
		r.Facts[FactFormat] = "fields"
	}
	m.Headers = h
	deliveries = max(deliveries, 1)
	copies, err := ports.RedeliveryCountFrom(h) // a counted copy written by an earlier version
	if err != nil && r.Err == nil {
		r.Err = err
	}
	r.RedeliveryCount = copies + int(deliveries) - 1
	r.Facts["times_delivered"] = strconv.FormatInt(deliveries, 10)
	return r, fields
}

// Field/value entries. A plain Redis producer writes its data as the
// entry's fields (redis-cli XADD s '*' id r-1 total 11), with no
// "payload" field. Such an entry is delivered with its fields as the
// payload: a JSON object of strings, keys in byte order (the client hands
// the fields over as a map), compact, without HTML escaping —
// {"id":"r-1","total":"11"}. Fields named "h:<name>" are headers; every
// other field is data, "key" included. A value that is not valid UTF-8 is
// replaced by U+FFFD in the payload, but the dead-letter copy keeps the
// original fields byte for byte: the portable layer writes that copy
// through SendBatch with the payload, so the driver keeps the fields of
// each field/value entry it holds under the delivery's identity (which
// the copy carries as its HeaderID), and SendBatch writes them back.

// dataFields returns the data fields of a field/value entry as a flat
// list sorted by name, and their JSON object.
func dataFields(values map[string]any) ([]any, []byte) {
	names := make([]string, 0, len(values))
	for k := range values {
		if !strings.HasPrefix(k, headerPrefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	obj, fields := make(map[string]string, len(names)), make([]any, 0, 2*len(names))
	for _, k := range names {
		s, _ := values[k].(string)
		obj[k], fields = s, append(fields, k, s)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(obj) // a map of strings always encodes; keys sorted
	return fields, bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// encodeFields returns the XADD list of a copy of a field/value entry: its
// data fields byte for byte and one "h:<name>" field per header of m.
func encodeFields(fields []any, m *ports.Message) []any {
	return appendHeaders(append(make([]any, 0, len(fields)+2*len(m.Headers)), fields...), m)
}

// fieldRef is a held field/value entry's fields; n counts its holders
// (several groups may hold one entry).
type fieldRef struct {
	fields []any
	n      int
}

func (c *conn) holdFields(id string, fields []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.fields[id]; r != nil {
		r.n++
	} else {
		c.fields[id] = &fieldRef{fields: fields, n: 1}
	}
}

func (c *conn) dropFields(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.fields[id]; r != nil {
		if r.n--; r.n <= 0 {
			delete(c.fields, id)
		}
	}
}

// encodeSend returns the XADD list of m: a held field/value entry's
// fields for its dead-letter copy, else m in Wire's format.
func (c *conn) encodeSend(m *ports.Message) []any {
	if id := m.Headers[ports.HeaderID]; id != "" && strings.HasSuffix(string(m.Topic), ports.DeadLetterSuffix) {
		c.mu.Lock()
		r := c.fields[id]
		c.mu.Unlock()
		if r != nil {
			return encodeFields(r.fields, m)
		}
	}
	return encodeFor(c.o.Wire, m)
}
