package kafkaqueue

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"
)

// rawRecord is one record of a record batch: key and value are slices of
// the batch's (decompressed) bytes, its headers hdrs[h0:h1] of its decoder.
type rawRecord struct {
	offset int64
	ts     int64 // milliseconds since the epoch
	key    []byte
	value  []byte
	h0, h1 int
}

type rawHeader struct{ key, value []byte }

// decoder reads the record batches of a share session's ShareFetch
// answers into slices it reuses from one answer to the next (an answer's
// records become driver records before the session's next request): a
// record costs no allocation here, where a kgo.Record costs several.
type decoder struct {
	recs []rawRecord
	hdrs []rawHeader
}

var (
	crc32c       = crc32.MakeTable(crc32.Castagnoli)
	decompressor = kgo.DefaultDecompressor()
)

// Record batch (magic 2: Kafka 0.11+, and share groups need Kafka 4)
// header offsets.
const (
	rbLength, rbMagic, rbCRC, rbAttributes = 8, 16, 17, 21
	rbLastDelta, rbBaseTime, rbMaxTime     = 23, 27, 35
	rbCount, rbRecords                     = 57, 61
)

// read replaces d's records with those of the batches in b at offsets
// from..last, control records left out, in offset order. It stops at a
// batch it cannot read (another magic, a bad CRC, a malformed record) and
// returns false; the acquired offsets it did not read are then gaps, as
// they were with kgo.ProcessFetchPartition.
func (d *decoder) read(b []byte, from, last int64) bool {
	d.recs, d.hdrs = d.recs[:0], d.hdrs[:0]
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
			continue // a control batch, or all before from
		}
		baseTime := int64(binary.BigEndian.Uint64(batch[rbBaseTime:]))
		recs := batch[rbRecords:]
		if codec := attrs & 0x07; codec != 0 {
			out, err := decompressor.Decompress(recs, kgo.CompressionCodecType(codec))
			if err != nil {
				return false
			}
			recs = out
		}
		for range int32(binary.BigEndian.Uint32(batch[rbCount:])) {
			length, used := kbin.Varint(recs)
			total := used + int(length)
			if used <= 0 || length < 0 || len(recs) < total {
				return false
			}
			r := kbin.Reader{Src: recs[used:total]}
			recs = recs[total:]
			r.Int8() // record attributes, unused
			ts := baseTime + r.Varlong()
			if attrs&0x08 != 0 { // log append time
				ts = int64(binary.BigEndian.Uint64(batch[rbMaxTime:]))
			}
			rec := rawRecord{offset: base + int64(r.Varint()), ts: ts, key: r.VarintBytes(), value: r.VarintBytes(), h0: len(d.hdrs)}
			for range max(r.VarintArrayLen(), 0) {
				d.hdrs = append(d.hdrs, rawHeader{r.VarintBytes(), r.VarintBytes()})
			}
			if !r.Ok() {
				return false
			}
			if rec.h1 = len(d.hdrs); rec.offset < from || rec.offset > last {
				d.hdrs = d.hdrs[:rec.h0]
			} else {
				d.recs = append(d.recs, rec)
			}
		}
	}
	return true
}
