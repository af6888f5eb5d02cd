package redis

import (
	"strings"
	"testing"
)

func TestMsgpackRoundTrip(t *testing.T) {
	for _, m := range []map[string]string{
		{},
		{"a": "b"},
		{"long": strings.Repeat("x", 300), "k": strings.Repeat("é", 40000)},
	} {
		got, err := unmsgpackMap(msgpackMap(m))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if len(got) != len(m) {
			t.Fatalf("got %d entries, want %d", len(got), len(m))
		}
		for k, v := range m {
			if got[k] != v {
				t.Fatalf("key %q: got %d bytes, want %d", k, len(got[k]), len(v))
			}
		}
	}
	for i := 0; i < 20; i++ { // truncations never panic
		b := msgpackMap(map[string]string{"key": "value", "k2": "v2"})
		if i < len(b) {
			_, _ = unmsgpackMap(b[:i])
		}
	}
}
