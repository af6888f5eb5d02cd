package kafkawire

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"sync"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Record converts m to a record of topic, the same for every Kafka
// adapter: the payload is the value, the partition key the key, the
// envelope the headers. Only the payload is copied (the caller may reuse
// its buffer once Send returns, also a cancelled Send, while the client
// still holds the record), into pay's shared chunks (a nil pay: its own
// allocation): the key and the header values are bytes over m's strings,
// which nothing writes, and a header key is m's string itself. envelope
// is what the record adds to its payload as sarama's
// ProducerMessage.ByteSize counts it (overhead, key, headers), for
// Message.CheckSize.
//
// A non-nil free gives the record from the ones given back to it (a
// record is reused once the client is done with it: see Records).
func Record(topic string, m *ports.Message, pay *Payloads, free *Records) (r *kgo.Record, envelope int) {
	var rh *recordWithHeaders
	if free != nil {
		rh = free.take()
	} else {
		rh = new(recordWithHeaders)
	}
	r = &rh.r
	if len(m.Headers) <= headersInline { // the record and its header list in one allocation
		r.Headers = rh.hs[:0]
	} else {
		r.Headers = make([]kgo.RecordHeader, 0, len(m.Headers))
	}
	r.Topic = topic
	envelope = 5*binary.MaxVarintLen32 + binary.MaxVarintLen64 + 1 + len(m.Key)
	for _, h := range m.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Name, Value: stringBytes(h.Value)})
		envelope += len(h.Name) + len(h.Value) + 2*binary.MaxVarintLen32
	}
	if m.Key != "" {
		r.Key = stringBytes(m.Key)
	}
	r.Value = pay.copy(m.Payload) // nil stays nil: Kafka tells it from empty
	return r, envelope
}

// Payloads holds the copies of the payloads Record takes: consecutive
// small payloads share a chunk (one allocation per chunk instead of one
// per record; a record the client still holds keeps its chunk in
// memory). The zero Payloads is ready; it is safe for concurrent use.
type Payloads struct {
	mu   sync.Mutex
	slab []byte
}

const (
	payloadChunk = 16 << 10
	payloadSmall = payloadChunk / 16 // larger payloads get their own allocation
)

// copy returns a copy of b; nil stays nil, empty stays empty.
func (p *Payloads) copy(b []byte) []byte {
	if p == nil || len(b) == 0 || len(b) > payloadSmall {
		return bytes.Clone(b)
	}
	p.mu.Lock()
	c := kit.Carve(&p.slab, len(b), payloadChunk)
	p.mu.Unlock()
	copy(c, b)
	return c
}

// stringBytes returns s's bytes without a copy, for the client to read
// only; an empty s gives an empty, not a nil, slice (a nil header value is
// Kafka's null).
func stringBytes(s string) []byte {
	if s == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// recordWithHeaders is a record with room for eight headers: what a
// message usually carries (content type, id, partition key, causation and
// correlation ids) and three more.
type recordWithHeaders struct {
	r  kgo.Record // first: a *kgo.Record Record made from Records points to its recordWithHeaders
	hs [headersInline]kgo.RecordHeader
}

const headersInline = 8

// Records keeps records for Record to reuse once the client is done with
// them (their promises were called: a committed transaction's, say): a
// record and its header list are one allocation of about 600 bytes that
// a busy producer otherwise makes per message. The zero Records is ready;
// it is safe for concurrent use.
type Records struct {
	mu   sync.Mutex
	free []*recordWithHeaders
}

// recordsKept bounds the records a Records keeps.
const recordsKept = 4096

// take returns a cleared record: one given back, or a new one.
func (rs *Records) take() *recordWithHeaders {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if n := len(rs.free); n > 0 {
		rh := rs.free[n-1]
		rs.free[n-1] = nil
		rs.free = rs.free[:n-1]
		return rh
	}
	return new(recordWithHeaders)
}

// Reuse gives back records that Record made from rs and that the client
// is done with; nothing may read or write them afterwards.
func (rs *Records) Reuse(records []*kgo.Record) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, r := range records {
		if len(rs.free) == recordsKept {
			return
		}
		rh := (*recordWithHeaders)(unsafe.Pointer(r)) // made by take: its first field
		*rh = recordWithHeaders{}
		rs.free = append(rs.free, rh)
	}
}

// Produce produces rs on cl, a client made with Franz.Opts (whose hook
// takes each record's result), and returns when each is confirmed, else
// one error per record (kit.Confirms.Wait): ctx.Err() for one not handed
// over in time, ports.ErrUnconfirmed wrapping why for one that failed
// after (it may have been written).
//
// The records go through ProduceSync, so they leave as one batch per
// partition (see Linger). ProduceSync runs on a goroutine of its own, so
// that Produce returns when ctx ends whatever franz-go still waits for (it
// resolves every record within the client's delivery timeout, or at
// Close), and each record's result is taken as franz-go gives it up
// (confirmHook), so that a Send cut short names exactly the records not
// confirmed yet.
func Produce(ctx context.Context, cl *kgo.Client, rs []*kgo.Record) []error {
	cf := kit.NewConfirms(len(rs))
	if err := ctx.Err(); err != nil {
		for i := range rs {
			cf.Resolve(i, err)
		}
		return cf.Wait(ctx, 0)
	}
	sends := make([]sent, len(rs))
	for i, r := range rs {
		sends[i] = sent{Context: ctx, cf: cf, i: i}
		r.Context = &sends[i]
	}
	go cl.ProduceSync(ctx, rs...) // its results are confirmHook's already
	return cf.Wait(ctx, 0)
}

// sent is the Context of a record Produce hands over: the caller's ctx,
// which franz-go fails the record with while it is not written yet, and
// where the record's result goes.
type sent struct {
	context.Context
	cf *kit.Confirms
	i  int
}

// confirmHook resolves the result of a record Produce handed over when
// franz-go gives the record up, just before its promise; a record of any
// other origin (a transactional producer's) is left alone.
type confirmHook struct{}

func (confirmHook) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if s, ok := r.Context.(*sent); ok {
		s.cf.Resolve(s.i, unconfirmed(err))
	}
}

// unconfirmed is a record's result as Produce reports it: nil when the
// brokers confirmed the record.
func unconfirmed(err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err)
	}
	return nil
}

// TxnOffsets adds the offsets of topic's partitions to the open
// transaction of the transactional producer cl, whose id is txnID:
// AddOffsetsToTxn, then TxnOffsetCommit with the producer's id and epoch
// and the consumer group member's generation and id, so that a member of
// an older generation is fenced (KIP-447). franz-go does it itself only
// for a group its GroupTransactSession consumes in.
func TxnOffsets(ctx context.Context, cl *kgo.Client, txnID, group string, gen int32, member, topic string, offsets iter.Seq2[int32, int64]) error {
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return err
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, id, epoch, group
	added, err := add.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(added.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("AddOffsetsToTxn: %w", err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, group, id, epoch
	req.Generation, req.MemberID = gen, member
	t := kmsg.TxnOffsetCommitRequestTopic{Topic: topic}
	for p, off := range offsets {
		t.Partitions = append(t.Partitions, kmsg.TxnOffsetCommitRequestTopicPartition{Partition: p, Offset: off, LeaderEpoch: -1})
	}
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{t}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("TxnOffsetCommit: %w", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("TxnOffsetCommit %s/%d: %w", t.Topic, p.Partition, err)
			}
		}
	}
	return nil
}
