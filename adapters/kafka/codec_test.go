package kafka

import (
	"errors"
	"testing"

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
