package kafkawire_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

func TestClassByCode(t *testing.T) {
	for code, want := range map[int16]error{3: ports.ErrNotFound, 6: ports.ErrUnreachable, 7: ports.ErrTimeout,
		10: ports.ErrTooLarge, 18: ports.ErrTooLarge, 29: ports.ErrAuth, 58: ports.ErrAuth, 69: ports.ErrNotFound} {
		if class, ok := kafkawire.Class(code); !ok || class.Code != want {
			t.Errorf("Class(%d) = %+v, %v; want %v", code, class, ok, want)
		}
	}
	if class, ok := kafkawire.Class(27); ok { // REBALANCE_IN_PROGRESS: the adapter's to judge
		t.Errorf("Class(27) = %+v, want not named", class)
	}
}

func TestParseMechanism(t *testing.T) {
	for in, want := range map[string]string{"plain": "PLAIN", "Scram-Sha-256": "SCRAM-SHA-256", "SCRAM-SHA-512": "SCRAM-SHA-512"} {
		if got, err := kafkawire.ParseMechanism(in); err != nil || got != want {
			t.Errorf("ParseMechanism(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "gssapi"} {
		if _, err := kafkawire.ParseMechanism(in); err == nil || !strings.Contains(err.Error(), "is not plain, scram-sha-256 or scram-sha-512") {
			t.Errorf("ParseMechanism(%q) = %v", in, err)
		}
	}
}

func TestNames(t *testing.T) {
	if got := kafkawire.Topic("ns", "orders/eu_west"); got != "ns.orders/eu-uwest" {
		t.Errorf("Topic = %q, want ns.orders/eu-uwest", got)
	}
	if kafkawire.Topic("ns", "a_b") == kafkawire.Topic("ns", "a.b") {
		t.Error("Topic maps a_b and a.b to one Kafka topic")
	}
	lb := ports.SubscriptionSpec{Topic: "t", Group: "g"}
	if got := kafkawire.Group("ns", lb); got != "ns.g" {
		t.Errorf("LoadBalance Group = %q, want ns.g", got)
	}
	bc := ports.SubscriptionSpec{Topic: "t", Mode: ports.Broadcast, Instance: "i1"}
	if got := kafkawire.Group("ns", bc); got != "ns.t.bcast.i1" {
		t.Errorf("Broadcast Group = %q, want ns.t.bcast.i1", got)
	}
}

// TestDecode: one buffer serves record after record, a header read
// passes over is left out, and a malformed redelivery count is poison.
func TestTopicsBuildEachNameOnce(t *testing.T) {
	var names kafkawire.Topics
	if got, want := names.Topic("ns", "a.b_c"), kafkawire.Topic("ns", "a.b_c"); got != want {
		t.Fatalf("Topics.Topic = %q, want %q", got, want)
	}
	if allocs := testing.AllocsPerRun(100, func() { names.Topic("ns", "a.b_c") }); allocs != 0 {
		t.Fatalf("%v allocations naming a known topic, want 0", allocs)
	}
}

func TestDecode(t *testing.T) {
	type hdr struct{ k, v string }
	read := func(h hdr, names *kit.Names) (string, []byte, bool) {
		return names.Intern([]byte(h.k)), []byte(h.v), h.k != ""
	}
	var d kafkawire.Decoder
	ts := time.Date(2026, 12, 1, 22, 3, 4, 5, time.UTC)
	r := kafkawire.Decode(&d, "t", kafkawire.Fields{Topic: "ns.t", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("v"), Timestamp: ts},
		[]hdr{{"a", "1"}, {"", "x"}, {"b", "22"}}, read)
	if r.BrokerID != "kafka:ns.t/3/42" || r.Message.Key != "k" || string(r.Message.Payload) != "v" || r.Err != nil ||
		len(r.Message.Headers) != 2 || r.Message.Headers.Get("a") != "1" || r.Message.Headers.Get("b") != "22" {
		t.Fatalf("record %+v", r)
	}
	if got, want := r.Facts.String(), "topic=ns.t partition=3 offset=42 timestamp="+ts.Format(time.RFC3339Nano); got != want {
		t.Fatalf("facts %s, want %s", got, want)
	}
	r2 := kafkawire.Decode(&d, "t", kafkawire.Fields{Topic: "ns.t", Offset: 7, Member: kafkawire.MemberFacts{ShareGroup: "g", DeliveryCount: 2}},
		[]hdr{{ports.HeaderRedeliveryCount, "x"}}, read)
	if !errors.Is(r2.Err, ports.ErrPoison) || r2.Facts.Get("header-error") == "" || r2.Facts.Get("timestamp") != "" || r2.BrokerID != "kafka:ns.t/0/7" {
		t.Fatalf("record %+v", r2)
	}
	var keys []string
	for k := range r2.Facts.All() {
		keys = append(keys, k)
	}
	if !slices.Equal(keys, []string{"topic", "partition", "offset", "share-group", "delivery-count", "header-error"}) ||
		r2.Facts.Get("delivery-count") != "2" || r2.Facts.Get("share-group") != "g" {
		t.Fatalf("facts %s", r2.Facts)
	}
	if r.BrokerID != "kafka:ns.t/3/42" || r.Message.Headers.Get("b") != "22" {
		t.Fatalf("the next record changed the first: %+v", r)
	}
	// Kafka allows a name twice: it appears once, with its last value,
	// and the headers' storage ends with them (an append copies).
	r3 := kafkawire.Decode(&d, "t", kafkawire.Fields{Topic: "ns.t", Offset: 8}, []hdr{{"a", "1"}, {"b", "2"}, {"a", "3"}}, read)
	h := r3.Message.Headers
	if want := ports.NewHeaders("a", "3", "b", "2"); !slices.Equal(h, want) || cap(h) != len(h) {
		t.Fatalf("headers %v (cap %d), want %v", h, cap(h), want)
	}
}

func TestRecordCopiesThePayloadOnly(t *testing.T) {
	payload := []byte(`{"v":1}`)
	m := ports.Message{Topic: "t", Key: "k", Payload: payload, Headers: ports.NewHeaders("a", "1", "empty", "", ports.HeaderID, "id-1")}
	var pay kafkawire.Payloads
	r, envelope := kafkawire.Record("ns.t", &m, &pay, nil)
	copy(payload, "XXXXXXX") // the caller reuses its buffer once Send returns
	if r.Topic != "ns.t" || string(r.Key) != "k" || string(r.Value) != `{"v":1}` {
		t.Fatalf("record %+v", r)
	}
	got := map[string]string{}
	for _, h := range r.Headers {
		if h.Value == nil {
			t.Fatalf("header %q has a nil (Kafka null) value", h.Key)
		}
		got[h.Key] = string(h.Value)
	}
	if len(got) != 3 || got["a"] != "1" || got["empty"] != "" || got[ports.HeaderID] != "id-1" {
		t.Fatalf("headers %v", got)
	}
	if want := 5*5 + 10 + 1 + len("k") + 3*2*5 + len("a1emptyid") + len(ports.HeaderID) + len("-1"); envelope != want {
		t.Fatalf("envelope %d, want %d (sarama's count)", envelope, want)
	}
	for _, pay := range []*kafkawire.Payloads{nil, &pay} {
		if r, _ := kafkawire.Record("ns.t", &ports.Message{Topic: "t"}, pay, nil); r.Value != nil || r.Key != nil {
			t.Fatalf("a nil payload and no key: value %v, key %v, want nil (Kafka's null)", r.Value, r.Key)
		}
		if r, _ := kafkawire.Record("ns.t", &ports.Message{Topic: "t", Payload: []byte{}}, pay, nil); r.Value == nil {
			t.Fatal("an empty payload became nil (Kafka's null)")
		}
	}
	// Consecutive payloads share a chunk, and never overlap.
	r2, _ := kafkawire.Record("ns.t", &ports.Message{Topic: "t", Payload: []byte("second")}, &pay, nil)
	r2.Value = append(r2.Value, "!"...)
	if string(r.Value) != `{"v":1}` || string(r2.Value) != "second!" {
		t.Fatalf("payloads %q and %q, want {\"v\":1} and second!", r.Value, r2.Value)
	}
	big := ports.Message{Topic: "t", Payload: make([]byte, 64<<10)}
	if rb, _ := kafkawire.Record("ns.t", &big, &pay, nil); len(rb.Value) != len(big.Payload) || &rb.Value[0] == &big.Payload[0] {
		t.Fatal("a large payload was not copied whole")
	}
	if allocs := testing.AllocsPerRun(100, func() { kafkawire.Record("ns.t", &m, nil, nil) }); allocs != 2 {
		t.Fatalf("%v allocations per record without Payloads, want 2 (the record with its headers, the payload)", allocs)
	}
	if allocs := testing.AllocsPerRun(1000, func() { kafkawire.Record("ns.t", &m, &pay, nil) }); allocs > 1.01 {
		t.Fatalf("%v allocations per record with Payloads, want 1 (the record with its headers) and a chunk now and then", allocs)
	}
}

// A record given back to Records is reused whole, cleared: the next one
// made from it is allocation-free (but for the payload's chunk) and
// carries nothing of the one before, whether either had more headers than
// a record holds inline or not.
func TestRecordsReuseGivenBackRecords(t *testing.T) {
	var free kafkawire.Records
	var pay kafkawire.Payloads
	many := ports.Message{Topic: "t", Key: "k", Payload: []byte("many")}
	for i := range 10 {
		many.Headers.Set(fmt.Sprintf("h%d", i), "v")
	}
	few := ports.Message{Topic: "t", Payload: []byte("few"), Headers: ports.NewHeaders("a", "1")}
	r1, _ := kafkawire.Record("ns.t", &many, &pay, &free)
	r1.Partition, r1.Offset = 3, 9 // as the client fills them in
	free.Reuse([]*kgo.Record{r1})
	r2, _ := kafkawire.Record("ns.t", &few, &pay, &free)
	if r2 != r1 {
		t.Fatal("a record given back was not reused")
	}
	if r2.Key != nil || string(r2.Value) != "few" || len(r2.Headers) != 1 || r2.Headers[0].Key != "a" || r2.Partition != 0 || r2.Offset != 0 {
		t.Fatalf("reused record %+v: want the second message's alone", r2)
	}
	free.Reuse([]*kgo.Record{r2})
	r3, _ := kafkawire.Record("ns.t", &many, &pay, &free)
	if len(r3.Headers) != 10 || string(r3.Key) != "k" {
		t.Fatalf("reused record %+v: want ten headers and key k", r3)
	}
	if allocs := testing.AllocsPerRun(1000, func() {
		r, _ := kafkawire.Record("ns.t", &few, &pay, &free)
		free.Reuse([]*kgo.Record{r})
	}); allocs > 0.01 {
		t.Fatalf("%v allocations per reused record, want none but a payload chunk now and then", allocs)
	}
}

func TestCheckTopics(t *testing.T) {
	if err := kafkawire.CheckTopics("f", map[ports.Topic]string{"orders": "legacy.orders"}); err != nil {
		t.Fatal(err)
	}
	for _, topics := range []map[ports.Topic]string{{"orders": "a b"}, {"orders": "a/b"}, {"orders": ""}, {"": "x"}} {
		var ve *ports.ValueError
		if err := kafkawire.CheckTopics("f", topics); !errors.As(err, &ve) || ve.Field != "f" {
			t.Errorf("CheckTopics(%v) = %v, want a ValueError for f", topics, err)
		}
	}
}

// BenchmarkDecode decodes a record with sluice's envelope headers, as a
// consumer does for every record.
func BenchmarkDecode(b *testing.B) {
	type hdr struct{ k, v []byte }
	read := func(h hdr, names *kit.Names) (string, []byte, bool) { return names.Intern(h.k), h.v, true }
	hs := []hdr{{[]byte(ports.HeaderID), []byte("01JEXAMPLE0000000000000000")}, {[]byte(ports.HeaderTime), []byte("2026-12-05T03:00:00.123456789Z")},
		{[]byte(ports.HeaderSpecVersion), []byte("1.0")}, {[]byte(ports.HeaderContentType), []byte("application/json")}}
	f := kafkawire.Fields{Topic: "ns.bench", Partition: 3, Value: []byte(`{"device":"d-7","value":21.5}`), Timestamp: time.Now()}
	var d kafkawire.Decoder
	b.ReportAllocs()
	for i := range b.N {
		f.Offset = int64(i)
		_ = kafkawire.Decode(&d, "bench", f, hs, read)
	}
}

func TestFranzOpts(t *testing.T) {
	for _, f := range []kafkawire.Franz{{Password: "p"}, {Mechanism: "plain"}, {User: "u", Mechanism: "gssapi"}} {
		if _, err := f.Opts(); err == nil {
			t.Errorf("Franz%+v.Opts() = nil error, want a refusal", f)
		}
	}
	// A dialer of its own and TLS: franz-go takes one option for both.
	dial := func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("no") }
	for _, f := range []kafkawire.Franz{{User: "u"}, {User: "u", Mechanism: "scram-sha-512"}, {TLS: &tls.Config{}, Dial: dial}} {
		f.Brokers = []string{"127.0.0.1:1"}
		opts, err := f.Opts()
		if err != nil {
			t.Fatalf("Franz%+v.Opts(): %v", f, err)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatalf("Franz%+v: kgo.NewClient: %v", f, err)
		}
		cl.Close()
	}
}

// TestFranzDeliveryTimeoutBoundsAProduce: with the brokers unreachable, a
// produce whose context never ends fails after DeliveryTimeout instead
// of being retried for ever.
func TestFranzDeliveryTimeoutBoundsAProduce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	opts, err := kafkawire.Franz{Brokers: []string{addr}, DeliveryTimeout: time.Second}.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	done := make(chan error, 1)
	go func() {
		done <- cl.ProduceSync(context.Background(), &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr()
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a produce to unreachable brokers succeeded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a produce to unreachable brokers with a context that never ends still waits after 20s: the delivery timeout does not bound it")
	}
}

// batchCounter counts the record batches a consumer reads.
type batchCounter struct{ batches, records atomic.Int64 }

func (c *batchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c.batches.Add(1)
	c.records.Add(int64(m.NumRecords))
}

// TestProduceWritesOneBatchPerPartition: the records of one Produce leave
// as one batch per partition, and no Produce waits for the linger (here a
// minute, longer than the test waits, so that no timer ends it: only
// Produce can).
func TestProduceWritesOneBatchPerPartition(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const partitions, n = 4, 400
	if err := c.CreateTopic("t", partitions, nil); err != nil {
		t.Fatal(err)
	}
	opts, err := kafkawire.Franz{Brokers: c.ListenAddrs()}.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ProducerLinger(time.Minute), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first record learns the topic's partitions. A record to a topic
	// the client knows no partitions of yet waits for the linger: Flush
	// ends it.
	warm := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Topic: "t", Value: []byte("warm-up")}, func(_ *kgo.Record, err error) { warm <- err })
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-warm; err != nil {
		t.Fatal(err)
	}
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: "t", Value: fmt.Appendf(nil, "%d", i)}
	}
	if errs := kafkawire.Produce(ctx, cl, rs); errs != nil {
		t.Fatalf("Produce of %d records within 30s: %v (a linger not ended by Produce would hold them a minute)", n, errors.Join(errs...))
	}
	count := &batchCounter{}
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(count))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for got := 0; got < n+1; {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records within 30s", got, n+1)
		}
		got += fs.NumRecords()
	}
	if b := count.batches.Load(); b != partitions+1 {
		t.Fatalf("%d records in %d batches; want the warm-up's and one per partition, %d", count.records.Load(), b, partitions+1)
	}
}

// TestFranzCompressesAsConfigured: the batches a Franz client produces
// carry the codec its Compression names (none when empty), and a word
// that names no codec is refused with the list of those that do.
func TestFranzCompressesAsConfigured(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Kafka's record attributes: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
	for word, want := range map[string]uint8{"": 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4} {
		if !kafkawire.IsCompression(word) {
			t.Errorf("IsCompression(%q) = false", word)
		}
		topic := "t-" + word
		if err := c.CreateTopic(topic, 1, nil); err != nil {
			t.Fatal(err)
		}
		opts, err := kafkawire.Franz{Brokers: c.ListenAddrs(), Compression: word}.Opts()
		if err != nil {
			t.Fatalf("Franz{Compression: %q}.Opts(): %v", word, err)
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			t.Fatal(err)
		}
		rs := make([]*kgo.Record, 50) // alike: every codec makes their batch smaller
		for i := range rs {
			rs[i] = &kgo.Record{Topic: topic, Value: []byte(strings.Repeat(`{"device":"d","value":1}`, 4))}
		}
		errs := kafkawire.Produce(ctx, cl, rs)
		cl.Close()
		if errs != nil {
			t.Fatalf("compression %q: produce: %v", word, errors.Join(errs...))
		}
		rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(rs); {
			fs := rd.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("compression %q: read %d of %d records within 30s", word, got, len(rs))
			}
			fs.EachRecord(func(r *kgo.Record) {
				got++
				if typ := r.Attrs.CompressionType(); typ != want {
					t.Errorf("compression %q: a record in a batch of codec %d, want %d", word, typ, want)
				}
			})
		}
		rd.Close()
	}
	_, err = kafkawire.Franz{Compression: "brotli"}.Opts()
	if err == nil || !strings.Contains(err.Error(), "none, snappy, lz4, zstd or gzip") || kafkawire.IsCompression("brotli") {
		t.Fatalf(`Franz{Compression: "brotli"}.Opts() = %v; want a refusal naming none, snappy, lz4, zstd or gzip`, err)
	}
}
