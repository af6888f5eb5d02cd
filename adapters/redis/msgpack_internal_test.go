package redis

import (
	"strings"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// Headers written in watermill-redisstream's format (MessagePack
// metadata) read back intact, and a truncated metadata field is poison,
// never a panic.
func TestMsgpackRoundTrip(t *testing.T) {
	values := func(h ports.Headers) map[string]any {
		out := encodeFor(nil, WireWatermill, &ports.Message{Payload: []byte("p"), Headers: h})
		m := map[string]any{}
		for i := 0; i+1 < len(out); i += 2 {
			v := out[i+1]
			if b, ok := v.([]byte); ok {
				v = string(b) // as Redis answers
			}
			m[out[i].(string)] = v
		}
		return m
	}
	for _, h := range []ports.Headers{
		{},
		ports.NewHeaders("a", "b"),
		ports.NewHeaders("long", strings.Repeat("x", 300), "k", strings.Repeat("é", 40000)),
	} {
		r, _ := decode(new(entryFacts), "s", "g", "1-0", values(h), 1)
		if r.Err != nil {
			t.Fatalf("decode: %v", r.Err)
		}
		r.Message.Headers.Del(ports.HeaderID) // the UUID field's, empty here
		if len(r.Message.Headers) != len(h) {
			t.Fatalf("got %d headers, want %d", len(r.Message.Headers), len(h))
		}
		for _, hdr := range h {
			k, v := hdr.Name, hdr.Value
			if r.Message.Headers.Get(k) != v {
				t.Fatalf("header %q: got %d bytes, want %d", k, len(r.Message.Headers.Get(k)), len(v))
			}
		}
	}
	v := values(ports.NewHeaders("key", "value", "k2", "v2"))
	meta := v[fieldWatermillMeta].(string)
	for i := 1; i < len(meta); i++ { // truncations never panic
		v[fieldWatermillMeta] = meta[:i]
		if r, _ := decode(new(entryFacts), "s", "g", "1-0", v, 1); !ports.IsPoison(r.Err) {
			t.Fatalf("metadata truncated to %d bytes: Err %v, want poison", i, r.Err)
		}
	}
}
