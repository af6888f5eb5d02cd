package kafka

import (
	"errors"
	"testing"
	"time"

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
		d := decode(cm, "t", map[string]string{})
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
	d := decode(cm, "t", map[string]string{})
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
