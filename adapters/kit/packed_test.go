package kit

import (
	"bytes"
	"testing"

	"github.com/sluicemq/sluice/ports"
)

func TestPackedCopiesIntoOneAllocation(t *testing.T) {
	payload := []byte(`{"v":1}`)
	m := &ports.Message{Payload: payload, Headers: ports.Headers{"ce-id": "abc", "content-type": "application/json", "empty": ""}}
	got := map[string][]byte{}
	var keys [][]byte
	value := Packed(m, func(k, v []byte) { got[string(k)] = v; keys = append(keys, k) })
	if !bytes.Equal(value, payload) || &value[0] == &payload[0] {
		t.Fatalf("payload %q: want a copy of %q", value, payload)
	}
	for k, v := range m.Headers {
		if gv, ok := got[k]; !ok || string(gv) != v || gv == nil {
			t.Fatalf("header %q = %q (nil %v), want %q", k, gv, gv == nil, v)
		}
	}
	// Capacities are capped: appending to one copy never overwrites the next.
	for _, k := range keys {
		if cap(k) != len(k) {
			t.Fatalf("key %q has capacity %d", k, cap(k))
		}
	}
	payload[0] = 'x'
	if value[0] != '{' {
		t.Fatal("the copy changed with the caller's payload")
	}
	if allocs := testing.AllocsPerRun(100, func() { Packed(m, func(k, v []byte) {}) }); allocs != 1 {
		t.Fatalf("%v allocations per call, want 1", allocs)
	}
}

func TestPackedKeepsANilPayloadNil(t *testing.T) {
	if v := Packed(&ports.Message{Headers: ports.Headers{"a": "b"}}, func(k, v []byte) {}); v != nil {
		t.Fatalf("nil payload packed as %q (non-nil)", v)
	}
	if v := Packed(&ports.Message{Payload: []byte{}}, func(k, v []byte) {}); v == nil || len(v) != 0 {
		t.Fatalf("empty payload packed as %v (nil %v)", v, v == nil)
	}
}
