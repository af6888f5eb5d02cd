package redis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/ports"
	"github.com/sluicemq/sluice/tck"
)

// fieldsOf splits a flat JSON object of strings into its field/value
// pairs, in order.
func fieldsOf(body []byte) ([]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("foreign body %s is not a JSON object", body)
	}
	var out []any
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		v, err := dec.Token()
		if err != nil {
			return nil, err
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("foreign body %s: value of %v is not a string", body, k)
		}
		out = append(out, k, s)
	}
	return out, nil
}

// PublishForeign implements tck.ForeignProducer as a plain Redis producer
// writes: XADD <stream> * <field> <value> … with one field per key of the
// body (as redis-cli XADD s '*' id r-1 total 11 does), no "payload"
// field. The entry id is the broker's identity.
func (h *harness) PublishForeign(ctx context.Context, topic ports.Topic, m tck.ForeignMessage) (ports.IDSource, error) {
	fields, err := fieldsOf(m.Body)
	if err != nil {
		return ports.IDNone, err
	}
	c := goredis.NewClient(&goredis.Options{Addr: h.addr})
	defer c.Close()
	stream := h.ns + ":stream:" + string(topic)
	if err := c.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: fields}).Err(); err != nil {
		return ports.IDNone, fmt.Errorf("XADD %s: %w", stream, err)
	}
	return ports.IDBroker, nil
}

var _ tck.ForeignProducer = (*harness)(nil)
