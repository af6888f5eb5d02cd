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
// not know are ignored (so other producers' extra fields do no harm).
const (
	fieldPayload = "payload"
	fieldKey     = "key"
	headerPrefix = "h:"
	fieldStream  = "__stream" // only in a delayed message's hash
)

// encode returns the XADD field/value list of m.
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
// entry's times_delivered (1 on the first delivery).
func decode(topic ports.Topic, stream, group, id string, values map[string]any, deliveries int64) *ports.Delivery {
	d := &ports.Delivery{Facts: map[string]string{"stream": stream, "group": group, "entry": id}}
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
	d.Headers = h
	d.ID = h[ports.HeaderID]
	if d.ID == "" {
		d.ID = "redis:" + stream + ":" + id
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
	if _, ok := values[fieldPayload]; !ok && d.Err == nil {
		d.Err = ports.Poison(fmt.Errorf("redis stream %s entry %s has no %q field", stream, id, fieldPayload))
	}
	return d
}
