package ports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Envelope header names. They are identical on every broker; adapters map
// them onto the broker's header or property mechanism unchanged.
//
// Event attributes use the CloudEvents 1.0 HTTP binary-mode names; sluice's
// own extension attributes follow the CloudEvents extension naming rule
// (lower-case letters and digits). Transport facts that are not part of the
// event use the "sluice-" prefix.
const (
	HeaderSpecVersion   = "ce-specversion"   // always "1.0"
	HeaderID            = "ce-id"            // message id, unique per published message, stable across redeliveries
	HeaderType          = "ce-type"          // payload type, e.g. "com.example.order.paid.v1"
	HeaderSource        = "ce-source"        // producing service (optional)
	HeaderTime          = "ce-time"          // RFC 3339 publish time
	HeaderContentType   = "content-type"     // payload media type, "application/json" by convention
	HeaderRequestID     = "ce-requestid"     // request id, restored into the consumer's context
	HeaderTenantID      = "ce-tenantid"      // tenant id
	HeaderCorrelationID = "ce-correlationid" // one business journey
	HeaderCausationID   = "ce-causationid"   // id of the message that directly caused this one
	HeaderPartitionKey  = "ce-partitionkey"  // CloudEvents partitioning extension; mirrors Message.Key
	HeaderTraceParent   = "traceparent"      // W3C trace context
	HeaderTraceState    = "tracestate"       // W3C trace context

	HeaderRedeliveryCount  = "sluice-redelivery-count" // times this message was requeued (adapters that count themselves)
	HeaderDeadLetterReason = "sluice-dlq-reason"       // why a message was dead-lettered
	HeaderDeadLetterTopic  = "sluice-dlq-topic"        // the logical topic the message was dead-lettered from
	HeaderAttempts         = "sluice-attempts"         // delivery attempts made before dead-lettering
	HeaderDeadLetterTime   = "sluice-dlq-time"         // RFC 3339 time the dead-letter copy was made (where sluice makes it)
	HeaderIDSource         = "sluice-id-source"        // "broker" on a copy whose ce-id is the identity the broker gave the original (see IDSource)
)

// Header is one header of a message: a name and its value.
type Header struct {
	Name, Value string
}

// Headers are a message's envelope and user headers: each name at most
// once, in the order they were set (on a delivery, the broker's order
// where its client keeps one; an AMQP table or a Pulsar property map has
// none). Names are case-sensitive; the Header* constants are lower case.
//
// Headers is a slice, not a map: a message carries a handful of headers,
// which a scan finds faster than a hash, and an adapter hands a delivery's
// headers over without building a map (a slice of strings it already has).
// Read them with Get and Lookup, or range over them; change them with Set
// and Del. Like any slice, a copy shares its storage: Clone headers you did
// not make before changing them (a delivery's are read-only). Build a
// literal with NewHeaders. They encode to JSON as an object, as a map does.
type Headers []Header

// NewHeaders returns the headers of name, value pairs, in their order (a
// repeated name keeps its last value). It panics if nameValue has an odd
// number of elements, as strings.NewReplacer does.
func NewHeaders(nameValue ...string) Headers {
	if len(nameValue)%2 == 1 {
		panic("ports.NewHeaders: odd argument count")
	}
	h := make(Headers, 0, len(nameValue)/2)
	for i := 0; i < len(nameValue); i += 2 {
		h.Set(nameValue[i], nameValue[i+1])
	}
	return h
}

// HeadersFromMap returns m's entries as Headers, sorted by name (a map has
// no order of its own); nil for an empty m.
func HeadersFromMap(m map[string]string) Headers {
	if len(m) == 0 {
		return nil
	}
	h := make(Headers, 0, len(m))
	for k, v := range m {
		h = append(h, Header{k, v})
	}
	slices.SortFunc(h, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	return h
}

// Get returns the value of name, or "" (a nil Headers is empty).
func (h Headers) Get(name string) string {
	for i := range h {
		if h[i].Name == name {
			return h[i].Value
		}
	}
	return ""
}

// Lookup returns the value of name and whether h has it.
func (h Headers) Lookup(name string) (string, bool) {
	for i := range h {
		if h[i].Name == name {
			return h[i].Value, true
		}
	}
	return "", false
}

// Set sets name to value: in place when h has name (its copies see the new
// value, as with a map), appended otherwise.
func (h *Headers) Set(name, value string) {
	for i := range *h {
		if (*h)[i].Name == name {
			(*h)[i].Value = value
			return
		}
	}
	*h = append(*h, Header{name, value})
}

// Del removes name. When h has it, h gets new storage: copies of h keep
// theirs unchanged.
func (h *Headers) Del(name string) {
	i := slices.IndexFunc(*h, func(x Header) bool { return x.Name == name })
	if i < 0 {
		return
	}
	c := make(Headers, 0, len(*h)-1)
	c = append(c, (*h)[:i]...)
	*h = append(c, (*h)[i+1:]...)
}

// Clone returns a copy that does not share storage with h (nil for nil).
func (h Headers) Clone() Headers {
	if h == nil {
		return nil
	}
	return append(make(Headers, 0, len(h)), h...)
}

// Map returns h as a map, for an API that takes one.
func (h Headers) Map() map[string]string {
	m := make(map[string]string, len(h))
	for _, x := range h {
		m[x.Name] = x.Value
	}
	return m
}

// Equal reports whether h and o hold the same names with the same values,
// in any order.
func (h Headers) Equal(o Headers) bool {
	if len(h) != len(o) {
		return false
	}
	for _, x := range h {
		if v, ok := o.Lookup(x.Name); !ok || v != x.Value {
			return false
		}
	}
	return true
}

// MarshalJSON encodes h as a JSON object of strings, in h's order.
func (h Headers) MarshalJSON() ([]byte, error) {
	if h == nil {
		return []byte("null"), nil
	}
	b := []byte{'{'}
	for i, x := range h {
		if i > 0 {
			b = append(b, ',')
		}
		k, err := json.Marshal(x.Name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(x.Value)
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, k...), ':'), v...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON decodes a JSON object of strings (or null), keeping the
// object's order.
func (h *Headers) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytes.NewReader(b))
	t, err := d.Token()
	if err != nil {
		return err
	}
	if t == nil {
		*h = nil
		return nil
	}
	if t != json.Delim('{') {
		return fmt.Errorf("ports.Headers: want a JSON object, got %v", t)
	}
	out := Headers{}
	for d.More() {
		var k, v string
		if t, err = d.Token(); err != nil {
			return err
		}
		k, _ = t.(string)
		if err := d.Decode(&v); err != nil {
			return fmt.Errorf("ports.Headers: header %q: %w", k, err)
		}
		out.Set(k, v)
	}
	if _, err := d.Token(); err != nil {
		return err
	}
	*h = out
	return nil
}

// RedeliveryCountFrom parses the HeaderRedeliveryCount header. A missing
// header is 0; a malformed or negative one is an error wrapping ErrInvalid,
// so adapters can treat it as poison rather than guess.
func RedeliveryCountFrom(h Headers) (int, error) {
	s, ok := h.Lookup(HeaderRedeliveryCount)
	if !ok || s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, &HeaderError{Header: HeaderRedeliveryCount, Value: s}
	}
	return n, nil
}
