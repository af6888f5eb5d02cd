package redis

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/sluicemq/sluice/ports"
)

// Field/value entries. A plain Redis producer writes its data as the
// entry's fields (redis-cli XADD s '*' id r-1 total 11), with no
// "payload" field. Such an entry is delivered with its fields as the
// payload: a JSON object of strings, keys in byte order (Redis keeps the
// order of an entry's fields, but the client hands them over as a map),
// compact, without HTML escaping — {"id":"r-1","total":"11"}. Fields named
// "h:<name>" are headers, as in sluice's own format (a dead-letter copy
// adds its reason that way); every other field is data, "key" included.
//
// A value that is not valid UTF-8 cannot travel in JSON unchanged (it is
// replaced by U+FFFD in the payload); the original fields are kept as they
// are for the entry's requeue and dead-letter copies.

// FactFormat is the Delivery fact naming an entry's format: "fields" for a
// field/value entry mapped to a JSON payload.
const FactFormat = "format"

// dataFields returns the data fields of a field/value entry (every field
// but the "h:" headers) as a flat field/value list, sorted by field name,
// and their JSON object payload.
func dataFields(values map[string]any) (fields []any, payload []byte) {
	names := make([]string, 0, len(values))
	for k := range values {
		if !strings.HasPrefix(k, headerPrefix) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	obj := make(map[string]string, len(names))
	fields = make([]any, 0, 2*len(names))
	for _, k := range names {
		s, _ := values[k].(string)
		obj[k] = s
		fields = append(fields, k, s)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(obj) // a map of strings always encodes; keys sorted
	return fields, bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// encodeFields returns the XADD field/value list of a copy of a
// field/value entry: the original data fields, byte for byte, and one
// "h:<name>" field per header of m (its ce-id, the dead-letter reason).
func encodeFields(fields []any, m *ports.Message) []any {
	out := make([]any, 0, len(fields)+2*len(m.Headers))
	out = append(out, fields...)
	for k, v := range m.Headers {
		out = append(out, headerPrefix+k, v)
	}
	return out
}

// The portable layer writes a dead-letter copy through SendBatch, as a
// message whose payload is the JSON object. So that the copy keeps the
// entry's original fields byte for byte, the driver keeps the fields of
// every field/value entry it holds (received, not acknowledged) under the
// delivery's identity, which the copy carries as its HeaderID; SendBatch
// writes a dead-letter message whose HeaderID is held with those fields.
type fieldRef struct {
	fields []any
	n      int // holders: several groups may hold the same entry
}

func (c *conn) holdFields(id string, fields []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.fields[id]; r != nil {
		r.n++
		return
	}
	c.fields[id] = &fieldRef{fields: fields, n: 1}
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

// encodeSend returns the XADD field/value list of m: the original fields
// of a held field/value entry for its dead-letter copy, else m in Wire's
// format.
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
