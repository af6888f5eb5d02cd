package kafkaqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// Acknowledge types of ShareFetch and ShareAcknowledge (KIP-932, KIP-1222).
const (
	ackGap     int8 = 0
	ackAccept  int8 = 1
	ackRelease int8 = 2
	ackReject  int8 = 3
	ackRenew   int8 = 4
)

// member is one share-group member on one topic: each record stays
// acquired until it is settled on its own (see the package doc).
type member struct {
	cl      *kgo.Client
	group   string
	id      string // the member id, made by the client
	topic   string // the physical topic
	logical ports.Topic
	tid     [16]byte
	wait    time.Duration // ShareFetch MaxWait

	interval atomic.Int64 // heartbeat interval the coordinator asks for
	lock     atomic.Int64 // the broker's acquisition lock duration
	stale    atomic.Bool  // leaders need a metadata refresh

	report func(error) // the failures of deferred accepts
	lazy   atomic.Bool // the records' headers stay in them (driver.HeaderDeferrer)
	facts  kafkawire.MemberFacts

	mu       sync.Mutex
	epoch    int32           // member epoch; 0: join
	assigned []int32         // partitions the group assigned to this member
	leaders  map[int32]int32 // partition -> leader broker
	sessions map[int32]*session
	wake     chan struct{} // closed and replaced when the assignment changes
}

// session is the member's share session on one broker: the broker checks
// each request's epoch, so requests go one at a time (locked), and each
// carries the acknowledgements pending (kit.AckSession). A reset loses
// every record acquired in the session.
type session struct {
	kit.AckSession[*handle, int8]
	node  int32
	epoch int32          // the next request's; 0 opens a session
	in    map[int32]bool // partitions in the session
	kd    kafkawire.Decoder
	marks []kit.Mark[int32, int8] // ranges's, reused (s locked)
}

// reset forgets the session: a new one opens with the next request.
func (s *session) reset() {
	s.epoch = 0
	s.Reset()
	clear(s.in)
}

func (s *session) bump() { s.epoch = max(s.epoch+1, 1) }

// acks is one call's acknowledgements of one type on one session.
type acks = kit.AckBatch[*handle, int8]

// handle is a record's settlement handle.
type handle struct {
	s              *session
	gen            uint32
	partition      int32
	offset         int64
	kit.RecordLock             // its acquisition lock, as far as the member knows
	rec            *kgo.Record // what a dead-letter copy is made of (member.record)
	count          int         // its delivery count
}

// meta refreshes the topic id and the partition leaders.
func (m *member) meta(ctx context.Context) ([]int32, error) {
	req := &kmsg.MetadataRequest{Topics: []kmsg.MetadataRequestTopic{{Topic: &m.topic}}}
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil {
		return nil, err
	}
	if len(resp.Topics) != 1 {
		return nil, kerr.UnknownTopicOrPartition
	}
	rt := resp.Topics[0]
	if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
		return nil, fmt.Errorf("kafkaqueue: topic %s: %w", m.topic, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tid = rt.TopicID
	m.stale.Store(false)
	parts := make([]int32, 0, len(rt.Partitions))
	for _, p := range rt.Partitions {
		m.leaders[p.Partition] = p.Leader
		parts = append(parts, p.Partition)
	}
	slices.Sort(parts)
	return parts, nil
}

// unstarted returns the partitions of parts that have no start offset in
// the group yet.
func (m *member) unstarted(ctx context.Context, parts []int32) ([]int32, error) {
	desc := &kmsg.DescribeShareGroupOffsetsRequest{Groups: []kmsg.DescribeShareGroupOffsetsRequestGroup{
		{GroupID: m.group, Topics: []kmsg.DescribeShareGroupOffsetsRequestGroupTopic{{Topic: m.topic, Partitions: parts}}}}}
	resp, err := desc.RequestWith(ctx, m.cl)
	if err != nil {
		return nil, err
	}
	var todo []int32
	for _, g := range resp.Groups {
		err = cmp.Or(err, kerr.ErrorForCode(g.ErrorCode))
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				err = cmp.Or(err, kerr.ErrorForCode(p.ErrorCode))
				if p.StartOffset < 0 {
					todo = append(todo, p.Partition)
				}
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("describe the start offsets of share group %s: %w", m.group, err)
	}
	return todo, nil
}

// initialize sets the start of every partition the group has not started
// on yet to the topic's end (or its oldest record). A group with members
// (on another topic) refuses: then fetch says a member must (sub.start).
func (m *member) initialize(ctx context.Context, parts []int32, earliest bool) (fetch bool, err error) {
	todo, err := m.unstarted(ctx, parts)
	if err != nil || len(todo) == 0 {
		return false, err
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = m.topic
	for _, p := range todo {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = p, -1
		if earliest {
			lp.Timestamp = -2
		}
		lt.Partitions = append(lt.Partitions, lp)
	}
	lo.Topics = append(lo.Topics, lt)
	lresp, err := lo.RequestWith(ctx, m.cl)
	if err != nil {
		return false, err
	}
	at := kmsg.AlterShareGroupOffsetsRequestTopic{Topic: m.topic}
	for _, t := range lresp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return false, err
			}
			at.Partitions = append(at.Partitions, kmsg.AlterShareGroupOffsetsRequestTopicPartition{Partition: p.Partition, StartOffset: p.Offset})
		}
	}
	alter := &kmsg.AlterShareGroupOffsetsRequest{GroupID: m.group, Topics: []kmsg.AlterShareGroupOffsetsRequestTopic{at}}
	aresp, err := alter.RequestWith(ctx, m.cl)
	if err == nil {
		err = kerr.ErrorForCode(aresp.ErrorCode)
		for _, t := range aresp.Topics {
			for _, p := range t.Partitions {
				err = cmp.Or(err, kerr.ErrorForCode(p.ErrorCode))
			}
		}
	}
	if errors.Is(err, kerr.NonEmptyGroup) {
		return true, nil
	}
	return false, err
}

// heartbeat joins (epoch 0), heartbeats, or leaves (epoch -1) and takes the
// assignment the coordinator sends.
func (m *member) heartbeat(ctx context.Context, leave bool) error {
	m.mu.Lock()
	req := &kmsg.ShareGroupHeartbeatRequest{GroupID: m.group, MemberID: m.id, MemberEpoch: m.epoch}
	if leave {
		req.MemberEpoch = -1
	} else if m.epoch == 0 {
		req.SubscribedTopicNames = []string{m.topic}
	}
	m.mu.Unlock()
	resp, err := req.RequestWith(ctx, m.cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if errors.Is(err, kerr.FencedMemberEpoch) || errors.Is(err, kerr.UnknownMemberID) {
			m.epoch = 0 // join again
		}
		return fmt.Errorf("kafkaqueue: share group %s heartbeat: %w", m.group, err)
	}
	m.epoch = resp.MemberEpoch
	if resp.HeartbeatIntervalMillis > 0 {
		m.interval.Store(int64(resp.HeartbeatIntervalMillis) * int64(time.Millisecond))
	}
	if a := resp.Assignment; a != nil {
		m.assigned = m.assigned[:0]
		for _, t := range a.TopicPartitions {
			if t.TopicID == m.tid {
				m.assigned = append(m.assigned, t.Partitions...)
			}
		}
		close(m.wake)
		m.wake = make(chan struct{})
	}
	return nil
}

// targets groups the assigned partitions by the session of their leader.
func (m *member) targets(ctx context.Context) (map[*session][]int32, <-chan struct{}, error) {
	if m.stale.Load() {
		if _, err := m.meta(ctx); err != nil {
			return nil, nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[*session][]int32{}
	for _, p := range m.assigned {
		node := m.leaders[p]
		s := m.sessions[node]
		if s == nil {
			s = m.session(node)
		}
		out[s] = append(out[s], p)
	}
	return out, m.wake, nil
}

// session opens the member's share session on node.
func (m *member) session(node int32) *session {
	s := &session{node: node, in: map[int32]bool{}}
	s.Send = func(as []*acks) { _ = m.acknowledge(s, as, s.epoch) }
	s.Report = func(a *acks, err error) {
		m.report(fmt.Errorf("kafkaqueue: deferred accept of %d record(s) failed (the broker redelivers them): %w", len(a.Handles), err))
	}
	m.sessions[node] = s
	return s
}

// fetch sends a ShareFetch on s for parts (the session changed to hold
// exactly them) carrying the pending acknowledgements, and returns the
// records it acquired. It long-polls up to wait, not at all when it
// carries acknowledgements. No ctx: acquired records are never dropped.
func (m *member) fetch(s *session, parts []int32, max int, wait time.Duration) ([]driver.Record, error) {
	s.Lock()
	defer s.Unlock()
	carry := s.Take(true)
	if slices.ContainsFunc(carry, func(a *acks) bool {
		return slices.ContainsFunc(a.Handles, func(h *handle) bool { return !slices.Contains(parts, h.partition) })
	}) { // a partition leaving the session: acknowledge before
		_ = m.acknowledge(s, carry, s.epoch)
		carry = nil
	}
	if len(carry) > 0 {
		wait = 0
	}
	acked := ranges(s, carry)
	req := &kmsg.ShareFetchRequest{GroupID: &m.group, MemberID: &m.id, ShareSessionEpoch: s.epoch, MaxWaitMillis: int32(wait / time.Millisecond),
		MinBytes: 1, MaxBytes: 50 << 20, MaxRecords: int32(max), BatchSize: int32(max)}
	add := kmsg.ShareFetchRequestTopic{TopicID: m.tid}
	for _, p := range parts {
		if !s.in[p] || len(acked[p]) > 0 {
			add.Partitions = append(add.Partitions, kmsg.ShareFetchRequestTopicPartition{Partition: p, AcknowledgementBatches: acked[p]})
		}
	}
	if len(add.Partitions) > 0 {
		req.Topics = append(req.Topics, add)
	}
	forget := kmsg.ShareFetchRequestForgottenTopicsData{TopicID: m.tid}
	for p := range s.in {
		if !slices.Contains(parts, p) {
			forget.Partitions = append(forget.Partitions, p)
		}
	}
	if len(forget.Partitions) > 0 {
		req.ForgottenTopicsData = append(req.ForgottenTopicsData, forget)
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.wait+15*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, m.cl.Broker(int(s.node)))
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		s.reset() // a lost response may have opened or moved the session
		m.stale.Store(true)
		m.finish(carry, nil, fmt.Errorf("%w: share fetch from broker %d: %w", errLost, s.node, err))
		return nil, fmt.Errorf("kafkaqueue: share fetch from broker %d: %w", s.node, err)
	}
	s.bump()
	codes := map[int32]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			codes[p.Partition] = p.AcknowledgeErrorCode
		}
	}
	m.finish(carry, codes, nil)
	for _, p := range add.Partitions {
		s.in[p.Partition] = true
	}
	for _, p := range forget.Partitions {
		delete(s.in, p)
	}
	if resp.AcquisitionLockTimeoutMillis > 0 {
		m.lock.Store(int64(resp.AcquisitionLockTimeoutMillis) * int64(time.Millisecond))
	}
	return m.decode(s, resp)
}

// decode returns the acquired records of resp and gives the broker back, as
// gaps, acquired offsets that hold no record (control records).
func (m *member) decode(s *session, resp *kmsg.ShareFetchResponse) ([]driver.Record, error) {
	var (
		gaps  []*handle
		perr  error
		n     int
		until = time.Now().Add(m.lockDuration())
	)
	for _, t := range resp.Topics {
		for i := range t.Partitions {
			for _, ar := range t.Partitions[i].AcquiredRecords {
				n += int(ar.LastOffset - ar.FirstOffset + 1)
			}
		}
	}
	hs, out := make([]handle, n), make([]driver.Record, 0, n) // the answer's, allocated at once
	for _, t := range resp.Topics {
		for i := range t.Partitions {
			rp := &t.Partitions[i]
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				m.stale.Store(true)
				perr = fmt.Errorf("kafkaqueue: share fetch %s/%d: %w", m.topic, rp.Partition, err)
				delete(s.in, rp.Partition)
				continue
			}
			if len(rp.AcquiredRecords) == 0 {
				continue
			}
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Topic: m.topic, Partition: rp.Partition, Offset: rp.AcquiredRecords[0].FirstOffset},
				&kmsg.FetchResponseTopicPartition{Partition: rp.Partition, RecordBatches: rp.Records}, decompressor, nil)
			recs, j := fp.Records, 0 // recs and the acquired ranges are in offset order
			for _, ar := range rp.AcquiredRecords {
				for off := ar.FirstOffset; off <= ar.LastOffset; off++ {
					h := &hs[0]
					hs = hs[1:]
					h.s, h.gen, h.partition, h.offset = s, s.Gen(), rp.Partition, off
					h.Ends(until)
					for j < len(recs) && recs[j].Offset < off {
						j++
					}
					if j < len(recs) && recs[j].Offset == off {
						h.rec, h.count = recs[j], int(ar.DeliveryCount)
						out = append(out, m.record(&s.kd, h, m.lazy.Load()))
					} else {
						gaps = append(gaps, h)
					}
				}
			}
		}
	}
	if len(gaps) > 0 {
		s.Queue(gaps, ackGap, false)
	}
	if len(out) == 0 && perr != nil {
		return nil, perr
	}
	return out, nil
}

// record maps h's record onto a driver.Record as kafka:// does (Decode, or
// DecodeLazy when lazy); the delivery count less one is the redelivery count.
func (m *member) record(kd *kafkawire.Decoder, h *handle, lazy bool) driver.Record {
	d, r, count := driver.Record{}, h.rec, h.count
	if lazy {
		d, lazy = kafkawire.DecodeLazy(kd, m.logical, r, &m.facts, count)
	}
	if !lazy {
		d = kafkawire.Decode(kd, m.logical, kafkawire.Fields{Topic: m.topic, Partition: h.partition, Offset: r.Offset, Key: r.Key, Value: r.Value,
			Timestamp: r.Timestamp, Member: kafkawire.MemberFacts{ShareGroup: m.group, DeliveryCount: count}},
			r.Headers, kafkawire.FranzHeader)
	}
	d.RedeliveryCount, d.Handle = max(count-1, 0), h
	return d
}

func (m *member) lockDuration() time.Duration { return time.Duration(m.lock.Load()) }

var decompressor = kgo.DefaultDecompressor()

// errLost: the broker took the records back (session reset, lock lapsed).
var errLost = fmt.Errorf("kafkaqueue: %w", driver.ErrRecordsLost)

// group groups the acknowledgement of hs with typ by session and, but for
// a renewal, queues it. A record whose session was reset or whose lock
// lapsed is left out: the error wraps driver.ErrRecordsLost.
func group(hs []*handle, typ int8, deferred bool) ([]*acks, error) {
	now := time.Now()
	as, lost := kit.GroupAcks(hs, typ, deferred, typ != ackRenew, func(h *handle) (*kit.AckSession[*handle, int8], bool) {
		return &h.s.AckSession, h.gen == h.s.Gen() && h.Held(now)
	})
	if lost > 0 {
		return as, fmt.Errorf("%w: %d record(s) whose lock lapsed or whose share session closed", errLost, lost)
	}
	return as, nil
}

// flush waits for the acknowledgements pending now on every session; what
// no fetch takes goes on a ShareAcknowledge, tried every ackLinger.
func (m *member) flush(ctx context.Context) error {
	m.mu.Lock()
	var as []*acks
	for _, s := range m.sessions {
		as = append(as, s.Take(false)...)
	}
	m.mu.Unlock()
	return kit.SettledAcks(ctx, as, ackLinger)
}

// renew renews the locks of hs, to end at until.
func (m *member) renew(hs []*handle, until time.Time) error {
	as, err := group(hs, ackRenew, false)
	errs := []error{err}
	for _, a := range as {
		s := a.Handles[0].s
		s.Lock()
		_ = m.acknowledge(s, []*acks{a}, s.epoch) // its error is a.Err()
		s.Unlock()
		if errs = append(errs, a.Err()); a.Err() == nil {
			for _, h := range a.Handles {
				h.Ends(until)
			}
		}
	}
	return errors.Join(errs...)
}

// batch is a run of contiguous offsets of one partition, one type.
type batch = kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch

// ranges returns the batches of the handles of as by partition (s
// locked). A handle of an earlier session is lost (an error on its acks).
func ranges(s *session, as []*acks) map[int32][]batch {
	marks := s.marks[:0]
	for _, a := range as {
		lost := 0
		for _, h := range a.Handles {
			if h.gen != s.Gen() || s.epoch == 0 {
				lost++
			} else {
				marks = append(marks, kit.Mark[int32, int8]{Log: h.partition, Off: h.offset, V: a.Kind})
			}
		}
		if lost > 0 {
			a.Fail(fmt.Errorf("%w: %d record(s) of a closed share session", errLost, lost))
		}
	}
	s.marks = marks // its storage, for the next call
	out := map[int32][]batch{}
	for _, r := range kit.Runs(marks) {
		out[r.Log] = append(out[r.Log], batch{FirstOffset: r.First, LastOffset: r.Last, AcknowledgeTypes: []int8{r.V}})
	}
	return out
}

// finish completes as with err or else their partitions' error codes (a
// failed deferred one is reported).
func (m *member) finish(as []*acks, codes map[int32]int16, err error) {
	for _, a := range as {
		errs := []error{err}
		for p, code := range codes {
			e := kerr.ErrorForCode(code)
			if e == nil || !slices.ContainsFunc(a.Handles, func(h *handle) bool { return h.partition == p }) {
				continue
			} else if errors.Is(e, kerr.InvalidRecordState) || errors.Is(e, kerr.NotLeaderForPartition) {
				e = fmt.Errorf("%w: %w", errLost, e)
			}
			errs = append(errs, fmt.Errorf("kafkaqueue: share acknowledge partition %d: %w", p, e))
		}
		a.Finish(errors.Join(errs...))
	}
}

// acknowledge sends as on a ShareAcknowledge (s locked); epoch -1 closes
// the session (the broker releases what it holds).
func (m *member) acknowledge(s *session, as []*acks, epoch int32) error {
	acked := ranges(s, as)
	if len(acked) == 0 && epoch != -1 {
		m.finish(as, nil, nil)
		return nil
	}
	req := &kmsg.ShareAcknowledgeRequest{GroupID: &m.group, MemberID: &m.id, ShareSessionEpoch: epoch, IsRenewAck: len(as) > 0 && as[0].Kind == ackRenew}
	rt := kmsg.ShareAcknowledgeRequestTopic{TopicID: m.tid}
	for p, bs := range acked {
		rp := kmsg.ShareAcknowledgeRequestTopicPartition{Partition: p}
		for _, b := range bs {
			rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch(b))
		}
		rt.Partitions = append(rt.Partitions, rp)
	}
	if len(rt.Partitions) > 0 {
		req.Topics = append(req.Topics, rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, m.cl.Broker(int(s.node)))
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil || epoch == -1 {
		s.reset()
		if err != nil {
			err = fmt.Errorf("%w: share acknowledge on broker %d: %w", errLost, s.node, err)
		}
		m.finish(as, nil, err)
		return err
	}
	s.bump()
	codes := map[int32]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			codes[p.Partition] = p.ErrorCode
		}
	}
	m.finish(as, codes, nil)
	return nil
}

// close releases every record still acquired (each session closes with
// epoch -1) and leaves the group; the heartbeat has stopped.
func (m *member) close(ctx context.Context) error {
	m.mu.Lock()
	sessions := slices.Collect(maps.Values(m.sessions))
	m.mu.Unlock()
	var errs []error
	for _, s := range sessions {
		s.Lock()
		if s.epoch != 0 {
			errs = append(errs, m.acknowledge(s, s.Take(true), -1))
		}
		s.Unlock()
	}
	return errors.Join(append(errs, m.heartbeat(ctx, true))...)
}
