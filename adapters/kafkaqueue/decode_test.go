package kafkaqueue

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The decoder reads what kgo.ProcessFetchPartition reads, record for
// record, on batches written with every compression codec, null and empty
// keys, values and headers, and a transaction's control batch, for the
// whole log and for an offset window inside it; and it reads them itself
// (no fallback to kgo).
func TestDecoderMatchesKgo(t *testing.T) {
	codecs := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
		"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	var topics []string
	for name := range codecs {
		topics = append(topics, "decode-"+name)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, codec := range codecs {
		t.Run(name, func(t *testing.T) {
			topic := "decode-" + name
			cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(codec),
				kgo.DefaultProduceTopic(topic), kgo.TransactionalID("tx-"+name), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			produce := func(from, n int) {
				var recs []*kgo.Record
				for i := from; i < from+n; i++ {
					r := &kgo.Record{Value: fmt.Appendf(nil, `{"n":%d}`, i), Timestamp: time.UnixMilli(1700000000000 + int64(i%7))}
					switch i % 5 {
					case 0: // null key, null value
						r.Value = nil
					case 1:
						r.Key = []byte{}
						r.Value = []byte{}
					case 2:
						r.Key = fmt.Appendf(nil, "k%d", i)
						r.Headers = []kgo.RecordHeader{{Key: "sluice-id", Value: fmt.Appendf(nil, "id-%d", i)}, {Key: "empty"}, {Key: fmt.Sprintf("k%d", i), Value: []byte("v")}}
					default:
						r.Key = []byte("same")
						r.Headers = []kgo.RecordHeader{{Key: "sluice-id", Value: fmt.Appendf(nil, "id-%d", i)}}
					}
					recs = append(recs, r)
				}
				// Each call is a transaction: its commit is a control batch.
				if err := cl.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
			}
			produce(0, 40)
			produce(40, 10)
			produce(50, 30)

			meta, err := (&kmsg.MetadataRequest{Topics: []kmsg.MetadataRequestTopic{{Topic: &topic}}}).RequestWith(ctx, cl)
			if err != nil || len(meta.Topics) != 1 {
				t.Fatalf("metadata: %v", err)
			}
			req := kmsg.NewPtrFetchRequest()
			req.ReplicaID, req.MaxBytes, req.MinBytes = -1, 10<<20, 1
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic, ft.TopicID = topic, meta.Topics[0].TopicID
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes = 10 << 20
			ft.Partitions = append(ft.Partitions, fp)
			req.Topics = append(req.Topics, ft)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
				t.Fatalf("fetch: %v", err)
			}
			raw := resp.Topics[0].Partitions[0].RecordBatches
			for _, w := range [][2]int64{{0, 1 << 40}, {7, 62}, {45, 45}} {
				var d decoder
				if !d.read(raw, w[0], w[1]) {
					t.Fatalf("window %v: the decoder could not read the batches", w)
				}
				want, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: topic, Offset: w[0]},
					&kmsg.FetchResponseTopicPartition{RecordBatches: raw}, kgo.DefaultDecompressor(), nil)
				var exp []*kgo.Record
				for _, r := range want.Records {
					if r.Offset <= w[1] {
						exp = append(exp, r)
					}
				}
				if len(d.recs) != len(exp) || len(exp) == 0 {
					t.Fatalf("window %v: decoded %d records, kgo %d", w, len(d.recs), len(exp))
				}
				for i, r := range exp {
					g := d.recs[i]
					if g.offset != r.Offset || g.ts != r.Timestamp.UnixMilli() || !sameBytes(g.key, r.Key) || !sameBytes(g.value, r.Value) || g.h1-g.h0 != len(r.Headers) {
						t.Fatalf("window %v record %d: got offset %d ts %d key %q value %q %d headers; kgo: %d %d %q %q %d",
							w, i, g.offset, g.ts, g.key, g.value, g.h1-g.h0, r.Offset, r.Timestamp.UnixMilli(), r.Key, r.Value, len(r.Headers))
					}
					for j, h := range r.Headers {
						if gh := d.hdrs[g.h0+j]; string(gh.key) != h.Key || !bytes.Equal(gh.value, h.Value) {
							t.Fatalf("window %v record %d header %d: got %q=%q, kgo %q=%q", w, i, j, gh.key, gh.value, h.Key, h.Value)
						}
					}
				}
			}
		})
	}
}

// sameBytes: equal, and both nil or both not.
func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }
