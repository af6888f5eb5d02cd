package redis

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluicemq/sluice/ports"
)

// A plain producer's field/value entry always decodes to a valid JSON
// object holding each data field (exactly, for UTF-8 values), its copy
// keeps every original value byte for byte, and decode never panics.
func FuzzFieldValueEntry(f *testing.F) {
	f.Add("id", "r-1", "total", "11")
	f.Add("html", "<a&b>", "bin", "\xff\x00")
	f.Add("h:ce-id", "x", "key", "k")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		values := map[string]any{k1: v1, k2: v2}
		for k := range values {
			if k == fieldPayload || k == fieldWatermillUUID {
				return // other formats
			}
		}
		d, fields := decode(new(entryFacts), "s", "g", "1-0", values, 1)
		if d.Err != nil && !strings.Contains(d.Err.Error(), ports.HeaderRedeliveryCount) {
			t.Fatalf("field/value entry %v is poison: %v", values, d.Err)
		}
		if !json.Valid(d.Message.Payload) {
			t.Fatalf("payload %q of %v is not JSON", d.Message.Payload, values)
		}
		var obj map[string]string
		if err := json.Unmarshal(d.Message.Payload, &obj); err != nil {
			t.Fatal(err)
		}
		data := 0
		for k, v := range values {
			if strings.HasPrefix(k, headerPrefix) {
				continue
			}
			data++
			if s := v.(string); utf8.ValidString(s) && utf8.ValidString(k) && obj[k] != s {
				t.Errorf("field %q = %q in the payload, want %q", k, obj[k], s)
			}
		}
		copied := map[string]any{}
		out := appendHeaders(fields, &ports.Message{Headers: ports.NewHeaders(ports.HeaderDeadLetterReason, "r")}) // a copy's XADD list
		for i := 0; i+1 < len(out); i += 2 {
			copied[argString(t, out[i])] = argString(t, out[i+1])
		}
		for k, v := range values {
			if !strings.HasPrefix(k, headerPrefix) && copied[k] != v {
				t.Errorf("copy has %q = %q, want %q byte for byte", k, copied[k], v)
			}
		}
		if len(fields) != 2*data {
			t.Errorf("%d data fields kept, want %d", len(fields)/2, data)
		}
	})
}

// argString is the string go-redis writes for an XADD argument of ours.
func argString(t *testing.T, v any) string {
	t.Helper()
	switch v := v.(type) {
	case string:
		return v
	case *string:
		return *v
	}
	t.Fatalf("XADD argument %#v is neither a string nor a *string", v)
	return ""
}

// The broker's identity is built only for an entry without the
// producer's: the identity rule takes the producer's first.
func TestBrokerIDOnlyWithoutTheProducersID(t *testing.T) {
	r, _ := decode(new(entryFacts), "s", "g", "1-0", map[string]any{fieldPayload: "{}", headerPrefix + ports.HeaderID: "p-1"}, 1)
	if r.BrokerID != "" || r.Message.Headers.Get(ports.HeaderID) != "p-1" {
		t.Fatalf("entry with the producer's id: broker id %q, header id %q; want none and p-1", r.BrokerID, r.Message.Headers.Get(ports.HeaderID))
	}
	r, _ = decode(new(entryFacts), "s", "g", "1-0", map[string]any{fieldPayload: "{}"}, 1)
	if r.BrokerID != "redis:s:1-0" {
		t.Fatalf("entry without an id: broker id %q, want redis:s:1-0", r.BrokerID)
	}
	if got := r.Facts.Get("entry"); got != "1-0" {
		t.Fatalf("entry fact %q, want 1-0", got)
	}
}

// TestAppendHeadersNamesEveryFieldInOneAllocation: the "h:" field names of
// a message's headers share one allocation, and stay right when their
// bytes outgrow the first guess (a long name).
func TestAppendHeadersNamesEveryFieldInOneAllocation(t *testing.T) {
	long := strings.Repeat("x", 100)
	m := &ports.Message{Headers: ports.NewHeaders(ports.HeaderContentType, "application/json", ports.HeaderID, "id-1", long, "v", ports.HeaderCausationID, "c")}
	var want []any
	for _, h := range m.Headers {
		want = append(want, headerPrefix+h.Name, h.Value)
	}
	out := appendHeaders(nil, m)
	got := make([]any, len(out))
	for i, v := range out {
		got[i] = *v.(*string)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("appendHeaders = %q, want %q", got, want)
	}
	buf := make([]any, 0, 16)
	short := &ports.Message{Headers: ports.NewHeaders(ports.HeaderContentType, "application/json", ports.HeaderID, "id-1", ports.HeaderCausationID, "c")}
	if n := testing.AllocsPerRun(100, func() { buf = appendHeaders(buf[:0], short) }); n > 2 {
		t.Fatalf("appendHeaders of 3 headers allocates %v times, want 2 (the names' bytes, the strings)", n)
	}
}
