package kafka

import (
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

// names derives physical topic and group names from logical ones.
type names struct{ ns string }

func (n names) topic(t ports.Topic) string { return n.ns + "." + string(t) }

// logical returns the logical topic of a physical one.
func (n names) logical(phys string) ports.Topic {
	return ports.Topic(strings.TrimPrefix(phys, n.ns+"."))
}

// group returns the consumer group of spec for this instance.
func (n names) group(spec ports.SubscriptionSpec, instance string) string {
	if spec.Mode == ports.Broadcast {
		base := spec.Group
		if base == "" {
			base = string(spec.Topic)
		}
		return n.ns + "." + base + ".bcast." + instance
	}
	return n.ns + "." + spec.Group
}

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
}

// maxInterned bounds a partition's table of interned header names, so
// records with ever-new header names cannot grow it without end.
const maxInterned = 256

// decode reads a consumed record. It never fails: malformed headers are
// reported in decoded.bad and the record is still delivered, with
// Delivery.Err set so the core dead-letters it as poison. names interns
// header names (nil: no interning); it belongs to the caller's goroutine.
//
// The key and every header value are slices of one string (one
// allocation instead of one per header and key).
func decode(cm *sarama.ConsumerMessage, topic ports.Topic, names map[string]string) decoded {
	var d decoded
	n := len(cm.Key)
	for _, rh := range cm.Headers {
		if rh != nil {
			n += len(rh.Value)
		}
	}
	var b strings.Builder
	b.Grow(n)
	b.Write(cm.Key)
	for _, rh := range cm.Headers {
		if rh != nil {
			b.Write(rh.Value)
		}
	}
	all := b.String()
	key, all := all[:len(cm.Key)], all[len(cm.Key):]
	h := make(ports.Headers, len(cm.Headers))
	for _, rh := range cm.Headers {
		if rh == nil {
			continue
		}
		v := all[:len(rh.Value)]
		all = all[len(rh.Value):]
		name, ok := names[string(rh.Key)]
		if !ok {
			name = string(rh.Key)
			if names != nil && len(names) < maxInterned {
				names[name] = name
			}
		}
		h[name] = v
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
