package amqp

import (
	"bytes"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// TestDecodeToleratesBrokerAndForeignHeaders: x-death (a list of tables),
// x-delivery-count and typed values from other publishers are never a
// reason to reject a delivery (Watermill issue #65).
func TestDecodeToleratesBrokerAndForeignHeaders(t *testing.T) {
	d := &amqp.Delivery{Headers: amqp.Table{
		ports.HeaderID:              "id-1",
		ports.HeaderRedeliveryCount: "2",
		"x-delivery-count":          int64(3),
		"x-death":                   []any{amqp.Table{"count": int64(1), "reason": "expired"}},
		"x-first-death-reason":      "expired",
		"priority":                  int32(5),
		"flag":                      true,
		"at":                        time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
		headerDelay:                 "120",
	}}
	got := decode(d)
	if got.returns != 3 || got.headers.Get(ports.HeaderRedeliveryCount) != "2" {
		t.Fatalf("returns %d, count header %q; want 3 and the copies' count left for the portable layer", got.returns, got.headers.Get(ports.HeaderRedeliveryCount))
	}
	if v, ok := Decode(d).Lookup(ports.HeaderRedeliveryCount); ok {
		t.Fatalf("Decode (interop) kept the transport's count header (%q)", v)
	}
	if got.headers.Get("priority") != "5" || got.headers.Get("flag") != "true" || got.headers.Get("at") != "2024-01-02T03:04:05Z" {
		t.Fatalf("typed headers rendered as %q %q %q", got.headers.Get("priority"), got.headers.Get("flag"), got.headers.Get("at"))
	}
	if _, ok := got.headers.Lookup("x-death"); ok || got.facts["x-death"] == "" || got.facts["x-first-death-reason"] != "expired" {
		t.Fatalf("broker headers must go to facts: headers %v facts %v", got.headers, got.facts)
	}
	if _, ok := got.headers.Lookup(headerDelay); ok {
		t.Fatal("the transport's delay header leaked into the envelope")
	}
	// On a classic queue only the redelivered flag is known.
	if classic := decode(&amqp.Delivery{Redelivered: true}); classic.returns != 1 {
		t.Fatalf("classic redelivered message: count %d, want 1", classic.returns)
	}
}

// FuzzDecode: any header values decode without panicking, into a count
// that is never negative (a malformed redelivery count is the portable
// layer's to judge: TestMalformedCountIsPoison).
func FuzzDecode(f *testing.F) {
	f.Add("3", "x", int64(0), true)
	f.Add("-1", "", int64(-5), false)
	f.Add("abc", "y", int64(1<<40), true)
	f.Fuzz(func(t *testing.T, count, other string, n int64, redelivered bool) {
		d := &amqp.Delivery{Redelivered: redelivered, Headers: amqp.Table{
			ports.HeaderRedeliveryCount: count, "other": other, "x-delivery-count": n, "n": n,
		}}
		if got := decode(d); got.returns < 0 || got.headers.Get(ports.HeaderRedeliveryCount) != count {
			t.Fatalf("count %d, count header %q; want a count of at least 0 and the header %q as sent", got.returns, got.headers.Get(ports.HeaderRedeliveryCount), count)
		}
	})
}

// TestEnvelopeRoundTrip: stamping fills the sender's headers, four of
// them travel as AMQP properties, and decoding gives the envelope back
// unchanged.
func TestEnvelopeRoundTrip(t *testing.T) {
	h := ports.NewHeaders(ports.HeaderType, "t.v1", ports.HeaderCorrelationID, "c", ports.HeaderContentType, "application/json", "user", "u",
		ports.HeaderSpecVersion, "1.0", ports.HeaderTime, "2024-01-02T03:04:05.000000006Z")
	m := ports.Message{Headers: h, Key: "k"}
	m.Stamp()
	p := encode(m.Headers, []byte("{}"))
	if p.MessageId == "" || p.Type != "t.v1" || p.CorrelationId != "c" || p.ContentType != "application/json" {
		t.Fatalf("properties %+v", p)
	}
	if _, ok := p.Headers[ports.HeaderType]; ok {
		t.Fatal("a header carried as a property is also in the table")
	}
	got := decode(&amqp.Delivery{Headers: p.Headers, MessageId: p.MessageId, Type: p.Type, CorrelationId: p.CorrelationId, ContentType: p.ContentType})
	want := ports.NewHeaders(
		ports.HeaderID, p.MessageId,
		ports.HeaderType, "t.v1",
		ports.HeaderCorrelationID, "c",
		ports.HeaderContentType, "application/json",
		"user", "u",
		ports.HeaderSpecVersion, "1.0",
		ports.HeaderTime, "2024-01-02T03:04:05.000000006Z",
		ports.HeaderPartitionKey, "k",
	)
	if len(got.headers) != len(want) {
		t.Fatalf("headers %v, want %v", got.headers, want)
	}
	for _, hdr := range want {
		k, v := hdr.Name, hdr.Value
		if got.headers.Get(k) != v {
			t.Fatalf("header %s = %q, want %q", k, got.headers.Get(k), v)
		}
	}
	if h.Get(ports.HeaderID) != "" {
		t.Fatal("encoding modified the caller's headers")
	}
	// A value too long for a property stays in the table.
	long := string(bytes.Repeat([]byte("x"), 300))
	p = encode(ports.NewHeaders(ports.HeaderID, long), nil)
	if p.MessageId != "" || p.Headers[ports.HeaderID] != long {
		t.Fatal("an id longer than 255 bytes must travel in the table")
	}
}
