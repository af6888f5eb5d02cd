package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// FuzzDecode: any header values decode without panicking; a malformed
// redelivery count is reported as a poison HeaderError.
func FuzzDecode(f *testing.F) {
	f.Add("3", []byte("k"), []byte(`{}`))
	f.Add("-1", []byte(nil), []byte(nil))
	f.Add("", []byte{0xff}, []byte{0})
	p := &claim{topic: "ns.t", facts: kafkawire.MemberFacts{Generation: "1"}}
	f.Fuzz(func(t *testing.T, count string, key, value []byte) {
		cm := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: ports.HeaderRedeliveryCount, Value: []byte(count)},
		}}
		for _, lazy := range []bool{false, true} { // a transport header: read at once either way
			r := decode(cm, "t", p, time.Now(), lazy)
			if r.Message.Key != string(key) || r.Lazy != nil {
				t.Fatalf("key %q, want %q; headers left in the record: %v", r.Message.Key, key, r.Lazy != nil)
			}
			if r.Err != nil && !errors.Is(r.Err, ports.ErrPoison) {
				t.Fatalf("header error %v is not poison", r.Err)
			}
			if _, err := ports.RedeliveryCountFrom(ports.NewHeaders(ports.HeaderRedeliveryCount, count)); (err != nil) != (r.Err != nil) {
				t.Fatalf("count %q: decode error %v, want %v", count, r.Err, err)
			}
		}
	})
}

// TestDecodeFacts: the record's identity and facts name its physical
// topic, partition, offset and timestamp, alike whether its headers are
// read at once or left in the record (lazy), which loads the same ones.
func TestDecodeFacts(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		ts := time.Date(2026, 12, 1, 22, 3, 4, 500600700, time.FixedZone("X", 3600))
		cm := &kgo.Record{Key: []byte("key-1"), Value: []byte(`{}`), Topic: "ns.t", Partition: 3, Offset: 1234567890123, Timestamp: ts,
			Headers: []kgo.RecordHeader{
				{Key: ports.HeaderID, Value: []byte("id-9")},
				{Key: "x-other", Value: []byte("v")},
				{Key: "x-twice", Value: []byte("1")},
				{Key: "x-twice", Value: []byte("2")},
			}}
		p := &claim{topic: "ns.t", id: 3, member: "m", facts: kafkawire.MemberFacts{Generation: "7", Member: "m"}}
		r := decode(cm, "t", p, time.Now(), lazy)
		h := r.Message.Headers
		if lazy {
			if h != nil || r.Lazy == nil {
				t.Fatalf("lazy: headers %v read at once", h)
			}
			if id, ok := r.Lazy.Lookup(ports.HeaderID); !ok || id != "id-9" {
				t.Fatalf("lazy: id %q %v", id, ok)
			}
			h = r.Lazy.Load()
			if allocs := testing.AllocsPerRun(100, func() { r.Lazy.Load() }); allocs > 2 {
				t.Fatalf("lazy: Load allocates %.1f times, want the values' string and the list alone", allocs)
			}
		}
		if want := ports.NewHeaders(ports.HeaderID, "id-9", "x-other", "v", "x-twice", "2"); r.Message.Key != "key-1" || !h.Equal(want) || len(h) != 3 {
			t.Fatalf("lazy %v: key %q headers %v, want %v", lazy, r.Message.Key, h, want)
		}
		// The broker's identity is built only where the identity rule
		// uses it: left out of a lazy record with the producer's id.
		if want := "kafka:ns.t/3/1234567890123"; lazy && r.BrokerID != "" || !lazy && r.BrokerID != want {
			t.Fatalf("lazy %v: broker id %q", lazy, r.BrokerID)
		}
		if id, src := kit.RecordIdentity(r.Message.Headers, r.Lazy, r.BrokerID); id != "id-9" || src != ports.IDProducer {
			t.Fatalf("lazy %v: identity %q (%v), want the producer's id-9", lazy, id, src)
		}
		for _, hs := range [][]kgo.RecordHeader{nil, {{Key: ports.HeaderID, Value: []byte{}}}} { // no producer id, an empty one
			other := &kgo.Record{Topic: "ns.t", Partition: 3, Offset: 5, Headers: hs}
			o := decode(other, "t", p, time.Now(), lazy)
			if id, src := kit.RecordIdentity(o.Message.Headers, o.Lazy, o.BrokerID); id != "kafka:ns.t/3/5" || src != ports.IDBroker {
				t.Fatalf("lazy %v, headers %v: identity %q (%v), want the broker's", lazy, hs, id, src)
			}
		}
		if f := r.Facts; f.Get("topic") != "ns.t" || f.Get("offset") != "1234567890123" || f.Get("partition") != "3" || f.Get("generation") != "7" || f.Get("member") != "m" || f.Get("timestamp") != ts.UTC().Format(time.RFC3339Nano) {
			t.Fatalf("lazy %v: facts %v", lazy, f)
		}
		cm.Timestamp = time.Time{}
		if r := decode(cm, "t", p, time.Now(), lazy); r.Facts.Get("timestamp") != "" {
			t.Fatalf("lazy %v: no timestamp: facts %v", lazy, r.Facts)
		}
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
		r, err := c.record(ctx, &m, nil)
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
