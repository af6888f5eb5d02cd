package kafka

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// FuzzDecode: any header values decode without panicking; a malformed
// redelivery count or not-before header is reported as a poison
// HeaderError and never yields a negative count.
func FuzzDecode(f *testing.F) {
	f.Add("3", "2026-01-02T03:04:05.123Z", []byte("k"), []byte(`{}`))
	f.Add("-1", "yesterday", []byte(nil), []byte(nil))
	f.Add("", "", []byte{0xff}, []byte{0})
	f.Fuzz(func(t *testing.T, count, notBefore string, key, value []byte) {
		cm := &sarama.ConsumerMessage{Key: key, Value: value, Headers: []*sarama.RecordHeader{
			{Key: []byte(ports.HeaderRedeliveryCount), Value: []byte(count)},
			{Key: []byte(HeaderNotBefore), Value: []byte(notBefore)},
			nil,
		}}
		d := decode(cm, "t", newInterner())
		if d.msg.Key != string(key) {
			t.Fatalf("key %q, want %q", d.msg.Key, key)
		}
		if d.count < 0 {
			t.Fatalf("negative count %d", d.count)
		}
		if _, ok := d.msg.Headers[HeaderNotBefore]; ok {
			t.Fatal("not-before header kept")
		}
		if d.bad != nil && !errors.Is(d.bad, ports.ErrPoison) {
			t.Fatalf("header error %v is not poison", d.bad)
		}
		if _, err := ports.RedeliveryCountFrom(ports.Headers{ports.HeaderRedeliveryCount: count}); err != nil && d.bad == nil {
			t.Fatalf("malformed count %q not reported", count)
		}
	})
}

// TestDecodeFactTexts: the offset and timestamp texts of the facts are
// cut from the same string as the key and header values; every part
// keeps its own bytes.
func TestDecodeFactTexts(t *testing.T) {
	ts := time.Date(2026, 12, 1, 22, 3, 4, 500600700, time.FixedZone("X", 3600))
	cm := &sarama.ConsumerMessage{Key: []byte("key-1"), Value: []byte(`{}`), Offset: 1234567890123, Timestamp: ts,
		Headers: []*sarama.RecordHeader{
			{Key: []byte(ports.HeaderID), Value: []byte("id-9")},
			{Key: []byte("x-other"), Value: []byte("v")},
		}}
	d := decode(cm, "t", newInterner())
	if d.msg.Key != "key-1" || d.msg.Headers[ports.HeaderID] != "id-9" || d.msg.Headers["x-other"] != "v" {
		t.Fatalf("key %q headers %v", d.msg.Key, d.msg.Headers)
	}
	if d.offsetText != "1234567890123" {
		t.Fatalf("offset text %q", d.offsetText)
	}
	if want := ts.UTC().Format(time.RFC3339Nano); d.timeText != want {
		t.Fatalf("time text %q, want %q", d.timeText, want)
	}
	cm.Timestamp, cm.Offset = time.Time{}, 0
	if d := decode(cm, "t", nil); d.timeText != "" || d.offsetText != "0" || d.msg.Key != "key-1" {
		t.Fatalf("no timestamp: time %q offset %q key %q", d.timeText, d.offsetText, d.msg.Key)
	}
}

// TestInterner: names are interned by position and by table, a changed
// order still yields the right names, and the table and the position list
// stay bounded.
func TestInterner(t *testing.T) {
	in := newInterner()
	a := in.name(0, []byte("ce-id"))
	b := in.name(1, []byte("ce-time"))
	if a != "ce-id" || b != "ce-time" {
		t.Fatalf("names %q %q", a, b)
	}
	if again := in.name(0, []byte("ce-id")); unsafe.StringData(again) != unsafe.StringData(a) {
		t.Fatal("the name at the same position was not interned")
	}
	// Swapped order: the table answers, with the same strings.
	if x := in.name(0, []byte("ce-time")); x != "ce-time" || unsafe.StringData(x) != unsafe.StringData(b) {
		t.Fatalf("swapped name %q not the interned one", x)
	}
	if y := in.name(1, []byte("ce-id")); y != "ce-id" || unsafe.StringData(y) != unsafe.StringData(a) {
		t.Fatalf("swapped name %q not the interned one", y)
	}
	for i := range 2 * maxInterned {
		k := fmt.Sprintf("h-%d", i)
		if got := in.name(i, []byte(k)); got != k {
			t.Fatalf("position %d: %q, want %q", i, got, k)
		}
	}
	if len(in.byName) > maxInterned || len(in.last) > maxPositions {
		t.Fatalf("interner grew to %d names, %d positions (bounds %d, %d)", len(in.byName), len(in.last), maxInterned, maxPositions)
	}
	var none *interner
	if got := none.name(3, []byte("x")); got != "x" {
		t.Fatalf("nil interner: %q", got)
	}
}

// BenchmarkDecode: one record with the envelope headers a sluice sender
// writes, decoded as a claim does (interned names).
func BenchmarkDecode(b *testing.B) {
	cm := benchRecord()
	in := newInterner()
	b.ReportAllocs()
	for b.Loop() {
		_ = decode(cm, "t", in)
	}
}

func benchRecord() *sarama.ConsumerMessage {
	hs := []*sarama.RecordHeader{}
	for _, kv := range [][2]string{
		{ports.HeaderContentType, "application/json"}, {"x-seq", "12345"},
		{ports.HeaderID, "0123456789abcdef01234567-1a2b"}, {ports.HeaderSpecVersion, "1.0"},
		{ports.HeaderTime, "2026-12-01T22:25:47.123456789Z"}, {ports.HeaderPartitionKey, "12345"},
	} {
		hs = append(hs, &sarama.RecordHeader{Key: []byte(kv[0]), Value: []byte(kv[1])})
	}
	return &sarama.ConsumerMessage{Key: []byte("12345"), Value: []byte(`{"device":"dev-1","value":1}`), Offset: 987654, Timestamp: time.Now(), Headers: hs}
}
