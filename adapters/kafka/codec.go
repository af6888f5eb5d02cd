package kafka

import (
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// HeaderNotBefore carries the earliest delivery time of a delayed message
// or a delayed requeue, as RFC 3339 with nanoseconds (this adapter's wire
// form; the name is kit.HeaderNotBefore). It is private to this adapter:
// it is removed from a Delivery's headers.
const HeaderNotBefore = kit.HeaderNotBefore

// producerMessage encodes m for the physical topic phys. Headers must
// already be stamped. notBefore, when non-zero, is written as
// HeaderNotBefore.
func producerMessage(phys string, m *ports.Message, notBefore time.Time) *sarama.ProducerMessage {
	hs := make([]sarama.RecordHeader, 0, len(m.Headers)+1)
	for k, v := range m.Headers {
		if k == HeaderNotBefore {
			continue
		}
		hs = append(hs, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	if !notBefore.IsZero() {
		hs = append(hs, sarama.RecordHeader{Key: []byte(HeaderNotBefore), Value: []byte(notBefore.UTC().Format(time.RFC3339Nano))})
	}
	pm := &sarama.ProducerMessage{Topic: phys, Value: sarama.ByteEncoder(m.Payload), Headers: hs}
	if m.Key != "" {
		pm.Key = sarama.StringEncoder(m.Key)
	}
	return pm
}

// decoded is what the adapter reads from one consumed record, kept as
// consumed: requeue and dead-letter copies are made from it, not from the
// Delivery (whose headers the handler may not change: ports.Delivery's
// headers are shared and read-only, so every hand-out shares msg's).
type decoded struct {
	msg       ports.Message
	count     int       // HeaderRedeliveryCount, 0 when missing or malformed
	notBefore time.Time // zero when not delayed
	// bad is the first malformed adapter header (redelivery count or
	// not-before), nil when all are well formed.
	bad *ports.HeaderError
	// offsetText and timeText are the record's offset and timestamp
	// (RFC 3339, UTC; "" when the record has none) as text, for the
	// Delivery's facts.
	offsetText, timeText string
}

// maxInterned bounds a partition's table of interned header names, so
// records with ever-new header names cannot grow it without end.
const maxInterned = 256

// maxPositions bounds interner.last.
const maxPositions = 32

// interner interns header names for one partition's claim goroutine.
// Records of one producer carry their headers in the same order, so the
// name at each position of the previous record is tried first (a byte
// comparison, no hashing); the table is the fallback.
type interner struct {
	byName map[string]string
	last   []string // the names at each header position of the last record
}

func newInterner() *interner { return &interner{byName: make(map[string]string)} }

// name returns the interned name of header key at position i (a fresh
// string when in is nil or the table is full).
func (in *interner) name(i int, key []byte) string {
	if in == nil {
		return string(key)
	}
	if i < len(in.last) && in.last[i] == string(key) {
		return in.last[i]
	}
	name, ok := in.byName[string(key)]
	if !ok {
		name = string(key)
		if len(in.byName) < maxInterned {
			in.byName[name] = name
		}
	}
	switch {
	case i < len(in.last):
		in.last[i] = name
	case i == len(in.last) && i < maxPositions:
		in.last = append(in.last, name)
	}
	return name
}

// decode reads a consumed record. It never fails: malformed headers are
// reported in decoded.bad and the record is still delivered, with
// Delivery.Err set so the core dead-letters it as poison. names interns
// header names (nil: no interning); it belongs to the caller's goroutine.
//
// The key, every header value and the offset and timestamp texts of the
// facts are slices of one string (one allocation instead of one per
// header, key and fact).
func decode(cm *sarama.ConsumerMessage, topic ports.Topic, names *interner) decoded {
	var d decoded
	n := len(cm.Key)
	for _, rh := range cm.Headers {
		if rh != nil {
			n += len(rh.Value)
		}
	}
	var offBuf [20]byte
	offset := strconv.AppendInt(offBuf[:0], cm.Offset, 10)
	n += len(offset)
	var tsBuf [40]byte
	var ts []byte
	if !cm.Timestamp.IsZero() {
		ts = cm.Timestamp.UTC().AppendFormat(tsBuf[:0], time.RFC3339Nano)
		n += len(ts)
	}
	var b strings.Builder
	b.Grow(n)
	b.Write(cm.Key)
	for _, rh := range cm.Headers {
		if rh != nil {
			b.Write(rh.Value)
		}
	}
	b.Write(offset)
	b.Write(ts)
	all := b.String()
	key, all := all[:len(cm.Key)], all[len(cm.Key):]
	facts := all[len(all)-len(offset)-len(ts):]
	d.offsetText, d.timeText = facts[:len(offset)], facts[len(offset):]
	h := make(ports.Headers, len(cm.Headers))
	for i, rh := range cm.Headers {
		if rh == nil {
			continue
		}
		v := all[:len(rh.Value)]
		all = all[len(rh.Value):]
		h[names.name(i, rh.Key)] = v
	}
	if s, ok := h[HeaderNotBefore]; ok {
		delete(h, HeaderNotBefore)
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			d.bad = &ports.HeaderError{Header: HeaderNotBefore, Value: s}
		} else {
			d.notBefore = t
		}
	}
	c, err := ports.RedeliveryCountFrom(h)
	if err != nil && d.bad == nil {
		d.bad = &ports.HeaderError{Header: ports.HeaderRedeliveryCount, Value: h[ports.HeaderRedeliveryCount]}
	}
	d.count = c
	d.msg = ports.Message{Topic: topic, Key: key, Payload: cm.Value, Headers: h}
	return d
}
