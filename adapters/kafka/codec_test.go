package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/ports"
)

// FuzzDecode: any header values decode without panicking; a malformed
// redelivery count is reported as a poison HeaderError.
func FuzzDecode(f *testing.F) {
	f.Add("3", []byte("k"), []byte(`{}`))
	f.Add("-1", []byte(nil), []byte(nil))
	f.Add("", []byte{0xff}, []byte{0})
	p := &claim{topic: "ns.t", genText: "1"}
	f.Fuzz(func(t *testing.T, count string, key, value []byte) {
		cm := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: ports.HeaderRedeliveryCount, Value: []byte(count)},
		}}
		r := decode(cm, "t", p, time.Now())
		if r.Message.Key != string(key) {
			t.Fatalf("key %q, want %q", r.Message.Key, key)
		}
		if r.Err != nil && !errors.Is(r.Err, ports.ErrPoison) {
			t.Fatalf("header error %v is not poison", r.Err)
		}
		if _, err := ports.RedeliveryCountFrom(ports.NewHeaders(ports.HeaderRedeliveryCount, count)); (err != nil) != (r.Err != nil) {
			t.Fatalf("count %q: decode error %v, want %v", count, r.Err, err)
		}
	})
}

// TestDecodeFacts: the record's identity and facts name its physical
// topic, partition, offset and timestamp.
func TestDecodeFacts(t *testing.T) {
	ts := time.Date(2026, 12, 1, 22, 3, 4, 500600700, time.FixedZone("X", 3600))
	cm := &kgo.Record{Key: []byte("key-1"), Value: []byte(`{}`), Offset: 1234567890123, Timestamp: ts,
		Headers: []kgo.RecordHeader{
			{Key: ports.HeaderID, Value: []byte("id-9")},
			{Key: "x-other", Value: []byte("v")},
		}}
	p := &claim{topic: "ns.t", id: 3, genText: "7", member: "m"}
	r := decode(cm, "t", p, time.Now())
	if r.Message.Key != "key-1" || r.Message.Headers.Get(ports.HeaderID) != "id-9" || r.Message.Headers.Get("x-other") != "v" {
		t.Fatalf("key %q headers %v", r.Message.Key, r.Message.Headers)
	}
	if r.BrokerID != "kafka:ns.t/3/1234567890123" {
		t.Fatalf("broker id %q", r.BrokerID)
	}
	if f := r.Facts; f.Get("offset") != "1234567890123" || f.Get("partition") != "3" || f.Get("generation") != "7" || f.Get("member") != "m" || f.Get("timestamp") != ts.UTC().Format(time.RFC3339Nano) {
		t.Fatalf("facts %v", f)
	}
	cm.Timestamp = time.Time{}
	if r := decode(cm, "t", p, time.Now()); r.Facts.Get("timestamp") != "" {
		t.Fatalf("no timestamp: facts %v", r.Facts)
	}
}

// TestRecordSizedAsSarama: a record carries m's key, payload and headers,
// and MaxMessageBytes counts it as sarama's ProducerMessage.ByteSize does.
func TestRecordSizedAsSarama(t *testing.T) {
	ctx := context.Background()
	c := &conn{opts: Options{Namespace: "ns"}.withDefaults()}
	m := ports.Message{Topic: "t", Key: "k-1", Payload: []byte("payload"), Headers: ports.NewHeaders("a", "1", "bb", "22")}
	c.topics.Store(c.topic(m.Topic), true) // no broker: the topic is known
	pm := &sarama.ProducerMessage{Key: sarama.StringEncoder(m.Key), Value: sarama.ByteEncoder(m.Payload)}
	for _, hdr := range m.Headers {
		k, v := hdr.Name, hdr.Value
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	for limit, fits := range map[int]bool{pm.ByteSize(2): true, pm.ByteSize(2) - 1: false} {
		c.opts.MaxMessageBytes = limit
		r, err := c.record(ctx, &m)
		if (err == nil) != fits || (err != nil && !errors.As(err, new(*ports.SizeError))) {
			t.Fatalf("MaxMessageBytes %d: record = %v, want fits=%v", limit, err, fits)
		}
		if r.Topic != "ns.t" || string(r.Key) != m.Key || string(r.Value) != "payload" || len(r.Headers) != 2 {
			t.Fatalf("record %+v", r)
		}
		for _, h := range r.Headers {
			if m.Headers.Get(h.Key) != string(h.Value) {
				t.Fatalf("header %s=%s, want %s", h.Key, h.Value, m.Headers.Get(h.Key))
			}
		}
	}
}
