package kafkaqueue

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/kit"
)

// rawRecord is one record of a record batch: its key and value are slices
// of the batch's (decompressed) bytes, its headers hdrs[h0:h1] of the
// decoder that read it.
type rawRecord struct {
	offset int64
	ts     int64 // milliseconds since the epoch
	key    []byte
	value  []byte
	h0, h1 int
}

// rawHeader is a record header; its key is interned.
type rawHeader struct {
	key   string
	value []byte
}

// decoder reads the record batches of one share session's ShareFetch
// answers. It reuses its slices from one answer to the next (the records
// of an answer are turned into driver records before the session's next
// request) and interns header keys, which repeat from record to record:
// a record costs no allocation of its own here, where kgo.Record costs the
// record, its header slice and a string per header key.
type decoder struct {
	recs []rawRecord
	hdrs []rawHeader
	keys kit.Names
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

var decompressor = kgo.DefaultDecompressor()

// reset forgets the records of the last answer.
func (d *decoder) reset() { d.recs, d.hdrs = d.recs[:0], d.hdrs[:0] }

// partition appends to d.recs the records of the batches in b at offsets
// from..last, control records left out, in offset order, and returns
// them. It reads magic-2 batches (Kafka 0.11+; share groups need Kafka 4)
// and falls back to kgo.ProcessFetchPartition for anything else or
// anything malformed, which then decides as it did before this decoder.
func (d *decoder) partition(topic string, partition int32, b []byte, from, last int64) []rawRecord {
	r0, h0 := len(d.recs), len(d.hdrs)
	if d.read(b, from, last) {
		return d.recs[r0:]
	}
	d.recs, d.hdrs = d.recs[:r0], d.hdrs[:h0]
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: topic, Partition: partition, Offset: from},
		&kmsg.FetchResponseTopicPartition{Partition: partition, RecordBatches: b}, decompressor, nil)
	for _, r := range fp.Records {
		if r.Offset > last {
			break
		}
		h0 := len(d.hdrs)
		for _, h := range r.Headers {
			d.hdrs = append(d.hdrs, rawHeader{key: h.Key, value: h.Value})
		}
		d.recs = append(d.recs, rawRecord{offset: r.Offset, ts: r.Timestamp.UnixMilli(), key: r.Key, value: r.Value, h0: h0, h1: len(d.hdrs)})
	}
	return d.recs[r0:]
}

// Record batch (magic 2) header offsets.
const (
	rbLength     = 8  // int32: the bytes after it
	rbMagic      = 16 // int8
	rbCRC        = 17 // uint32, CRC-32C of the bytes from rbAttributes on
	rbAttributes = 21 // int16
	rbLastDelta  = 23 // int32
	rbBaseTime   = 27 // int64
	rbMaxTime    = 35 // int64
	rbCount      = 57 // int32
	rbRecords    = 61
)

// read is partition's own decoding; false: leave it to kgo.
func (d *decoder) read(b []byte, from, last int64) bool {
	for len(b) >= rbRecords {
		base := int64(binary.BigEndian.Uint64(b))
		size := int(int32(binary.BigEndian.Uint32(b[rbLength:])))
		if size < rbRecords-12 || 12+size > len(b) {
			return size >= 0 && 12+size > len(b) // a truncated last batch is dropped, as kgo does
		}
		batch := b[:12+size]
		b = b[12+size:]
		if base > last {
			return true
		}
		if batch[rbMagic] != 2 || crc32.Checksum(batch[rbAttributes:], crc32c) != binary.BigEndian.Uint32(batch[rbCRC:]) {
			return false
		}
		attrs := binary.BigEndian.Uint16(batch[rbAttributes:])
		if attrs&0x20 != 0 || base+int64(int32(binary.BigEndian.Uint32(batch[rbLastDelta:]))) < from {
			continue // a control batch, or all before the first acquired offset
		}
		baseTime := int64(binary.BigEndian.Uint64(batch[rbBaseTime:]))
		maxTime := int64(binary.BigEndian.Uint64(batch[rbMaxTime:]))
		n := int(int32(binary.BigEndian.Uint32(batch[rbCount:])))
		recs := batch[rbRecords:]
		if codec := attrs & 0x07; codec != 0 {
			out, err := decompressor.Decompress(recs, kgo.CompressionCodecType(codec))
			if err != nil {
				return false
			}
			recs = out
		}
		for range n {
			length, used := kbin.Varint(recs)
			total := used + int(length)
			if used <= 0 || length < 0 || len(recs) < total {
				return false
			}
			r := kbin.Reader{Src: recs[used:total]}
			recs = recs[total:]
			r.Int8() // record attributes, unused
			tsDelta := r.Varlong()
			offset := base + int64(r.Varint())
			key := r.VarintBytes()
			value := r.VarintBytes()
			h0 := len(d.hdrs)
			for range max(r.VarintArrayLen(), 0) {
				k := r.VarintBytes()
				d.hdrs = append(d.hdrs, rawHeader{key: d.keys.Intern(k), value: r.VarintBytes()})
			}
			if !r.Ok() {
				return false
			}
			if offset < from || offset > last {
				d.hdrs = d.hdrs[:h0]
				continue
			}
			ts := baseTime + tsDelta
			if attrs&0x08 != 0 { // log append time
				ts = maxTime
			}
			d.recs = append(d.recs, rawRecord{offset: offset, ts: ts, key: key, value: value, h0: h0, h1: len(d.hdrs)})
		}
	}
	return true
}
