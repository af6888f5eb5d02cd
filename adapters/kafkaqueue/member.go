package kafkaqueue

import (
	"cmp"
	"context"
	"crypto/rand"
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
	cl    *kgo.Client
	group string
	id    string // the member id, made by the client
	topic string // the physical topic
	tid   [16]byte
	wait  time.Duration // ShareFetch MaxWait

	interval atomic.Int64 // heartbeat interval the coordinator asks for
	lock     atomic.Int64 // the broker's acquisition lock duration
	stale    atomic.Bool  // leaders need a metadata refresh

	mu       sync.Mutex
	epoch    int32           // member epoch; 0: join
	assigned []int32         // partitions the group assigned to this member
	leaders  map[int32]int32 // partition -> leader broker
	sessions map[int32]*session
	wake     chan struct{} // closed and replaced when the assignment changes
}

// session is the member's share session on one broker: the broker checks
// each request's epoch and bumps it on success, so requests go one at a
// time (mu is held by the request in flight). A reset loses every record
// acquired in the session. Acknowledgements wait in pending for the next
// request on the session: a ShareFetch carries them, or a ShareAcknowledge
// of their own when the session is free first.
type session struct {
	mu    sync.Mutex
	node  int32
	epoch int32          // the next request's; 0 opens a session
	gen   uint32         // counts resets
	in    map[int32]bool // partitions in the session

	pmu     sync.Mutex
	pending []*acks
}

// reset forgets the session: a new one opens with the next request.
func (s *session) reset() {
	s.epoch, s.gen = 0, s.gen+1
	clear(s.in)
}

func (s *session) bump() { s.epoch = max(s.epoch+1, 1) }

// queue adds a to the acknowledgements the next request carries.
func (s *session) queue(a *acks) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.pending = append(s.pending, a)
}

// take removes and returns the pending acknowledgements.
func (s *session) take() []*acks {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	p := s.pending
	s.pending = nil
	return p
}

// acks is one call's acknowledgements of one type on one session; done
// (with err) once the broker answered the request that carried them.
type acks struct {
	hs   []*handle
	typ  int8
	done bool
	err  error
}

// handle is a record's settlement handle.
type handle struct {
	s         *session
	gen       uint32
	partition int32
	offset    int64

	msg          ports.Message // what a dead-letter copy is made of
	id           string        // BrokerID
	redeliveries int
}

func newMember(cl *kgo.Client, group, topic string, wait time.Duration) *member {
	m := &member{cl: cl, group: group, topic: topic, wait: wait, id: rand.Text()[:22],
		leaders: map[int32]int32{}, sessions: map[int32]*session{}, wake: make(chan struct{})}
	m.interval.Store(int64(time.Second))
	m.lock.Store(int64(30 * time.Second))
	return m
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
// the group yet; an error the broker answers for the group or for one of
// them fails it.
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
// on yet to the topic's end (or its oldest record), so that the group
// keeps what is published from now on even before its first member
// fetches. A group with members (on another topic) refuses: then fetch
// reports that a member must start the partitions (sub.start).
func (m *member) initialize(ctx context.Context, parts []int32, earliest bool) (fetch bool, err error) {
	todo, err := m.unstarted(ctx, parts)
	if err != nil {
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
	if len(lt.Partitions) == 0 {
		return false, nil
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
		err = alterError(m.group, aresp)
	}
	if errors.Is(err, kerr.NonEmptyGroup) {
		return true, nil
	}
	return false, err
}

// alterError is the group's error in resp, or else the first partition's.
func alterError(group string, resp *kmsg.AlterShareGroupOffsetsResponse) error {
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("set the start offset of %s/%d for share group %s: %w", t.Topic, p.Partition, group, err)
			}
		}
	}
	return nil
}

// members returns how many members the group has.
func (m *member) members(ctx context.Context) (int, error) {
	req := &kmsg.ShareGroupDescribeRequest{GroupIDs: []string{m.group}}
	resp, err := req.RequestWith(ctx, m.cl)
	if err != nil || len(resp.Groups) == 0 {
		return 0, err
	}
	g := resp.Groups[0]
	if err := kerr.ErrorForCode(g.ErrorCode); err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return 0, err
	}
	return len(g.Members), nil
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
			s = &session{node: node, in: map[int32]bool{}}
			m.sessions[node] = s
		}
		out[s] = append(out[s], p)
	}
	return out, m.wake, nil
}

// acquired is one fetched record with its handle and delivery count.
type acquired struct {
	r     *kgo.Record
	h     *handle
	count int
}

// fetch sends one ShareFetch on s for parts (the session is opened or
// changed to hold exactly parts), carrying the pending acknowledgements,
// and returns the records it acquired. It long-polls up to wait, not at
// all when it carries acknowledgements (their callers wait for its
// answer). It is not cancelled with the caller's ctx: records the broker
// acquired for the member are never dropped on the way.
func (m *member) fetch(s *session, parts []int32, max int, wait time.Duration) ([]acquired, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	carry := s.take()
	if slices.ContainsFunc(carry, func(a *acks) bool {
		return slices.ContainsFunc(a.hs, func(h *handle) bool { return !slices.Contains(parts, h.partition) })
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
		finish(carry, nil, fmt.Errorf("%w: share fetch from broker %d: %w", errLost, s.node, err))
		return nil, fmt.Errorf("kafkaqueue: share fetch from broker %d: %w", s.node, err)
	}
	s.bump()
	codes := map[int32]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			codes[p.Partition] = p.AcknowledgeErrorCode
		}
	}
	finish(carry, codes, nil)
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
func (m *member) decode(s *session, resp *kmsg.ShareFetchResponse) ([]acquired, error) {
	var out []acquired
	var gaps []*handle
	var perr error
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
				&kmsg.FetchResponseTopicPartition{Partition: rp.Partition, RecordBatches: rp.Records}, kgo.DefaultDecompressor(), nil)
			for _, ar := range rp.AcquiredRecords {
				for off := ar.FirstOffset; off <= ar.LastOffset; off++ {
					h := &handle{s: s, gen: s.gen, partition: rp.Partition, offset: off}
					if i, ok := slices.BinarySearchFunc(fp.Records, off, func(r *kgo.Record, off int64) int { return cmp.Compare(r.Offset, off) }); ok {
						out = append(out, acquired{r: fp.Records[i], h: h, count: int(ar.DeliveryCount)})
					} else {
						gaps = append(gaps, h)
					}
				}
			}
		}
	}
	if len(gaps) > 0 {
		s.queue(&acks{hs: gaps, typ: ackGap})
	}
	if len(out) == 0 && perr != nil {
		return nil, perr
	}
	return out, nil
}

func (m *member) lockDuration() time.Duration { return time.Duration(m.lock.Load()) }

// errLost: the broker took the records back (session reset, lock lapsed).
var errLost = fmt.Errorf("kafkaqueue: %w", driver.ErrRecordsLost)

// ack acknowledges hs with typ and returns once the broker answered. On
// each session they ride on the next request: the ShareFetch after the one
// in flight, or a ShareAcknowledge sent here when the session is free
// first. A renewal goes on a ShareAcknowledge of its own.
func (m *member) ack(hs []*handle, typ int8) error {
	bySession := map[*session]*acks{}
	for _, h := range hs {
		if bySession[h.s] == nil {
			bySession[h.s] = &acks{typ: typ}
		}
		bySession[h.s].hs = append(bySession[h.s].hs, h)
	}
	var errs []error
	for s, a := range bySession {
		if typ != ackRenew {
			s.queue(a)
		}
		s.mu.Lock()
		if typ == ackRenew {
			_ = m.acknowledge(s, []*acks{a}, s.epoch)
		} else if !a.done { // no fetch took it
			_ = m.acknowledge(s, s.take(), s.epoch)
		}
		s.mu.Unlock()
		errs = append(errs, a.err)
	}
	return errors.Join(errs...)
}

// batch is an acknowledgement batch: contiguous offsets of one partition
// acknowledged with one type.
type batch = kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch

// ranges returns the batches of the handles of as by partition; a handle
// of an earlier session is lost (an error on its acks).
func ranges(s *session, as []*acks) map[int32][]batch {
	out := map[int32][]batch{}
	for _, a := range as {
		lost := 0
		for _, h := range a.hs {
			if h.gen != s.gen || s.epoch == 0 {
				lost++
			} else {
				out[h.partition] = append(out[h.partition], batch{FirstOffset: h.offset, LastOffset: h.offset, AcknowledgeTypes: []int8{a.typ}})
			}
		}
		if lost > 0 {
			a.err = fmt.Errorf("%w: %d record(s) of a closed share session", errLost, lost)
		}
	}
	for p, bs := range out {
		slices.SortFunc(bs, func(x, y batch) int { return cmp.Compare(x.FirstOffset, y.FirstOffset) })
		merged := bs[:1]
		for _, b := range bs[1:] {
			if l := &merged[len(merged)-1]; l.LastOffset == b.FirstOffset-1 && l.AcknowledgeTypes[0] == b.AcknowledgeTypes[0] {
				l.LastOffset = b.LastOffset
			} else {
				merged = append(merged, b)
			}
		}
		out[p] = merged
	}
	return out
}

// finish completes as with the error of the request that carried them
// (err) or the acknowledgement error codes of their partitions.
func finish(as []*acks, codes map[int32]int16, err error) {
	for _, a := range as {
		errs := []error{a.err, err}
		for p, code := range codes {
			e := kerr.ErrorForCode(code)
			if e == nil || !slices.ContainsFunc(a.hs, func(h *handle) bool { return h.partition == p }) {
				continue
			} else if errors.Is(e, kerr.InvalidRecordState) || errors.Is(e, kerr.NotLeaderForPartition) {
				e = fmt.Errorf("%w: partition %d: %w", errLost, p, e)
			}
			errs = append(errs, fmt.Errorf("kafkaqueue: share acknowledge partition %d: %w", p, e))
		}
		a.err, a.done = errors.Join(errs...), true
	}
}

// acknowledge sends as on a ShareAcknowledge of their own (s locked);
// epoch -1 closes the session (the broker releases what it holds).
func (m *member) acknowledge(s *session, as []*acks, epoch int32) error {
	acked := ranges(s, as)
	if len(acked) == 0 && epoch != -1 {
		finish(as, nil, nil)
		return nil
	}
	req := &kmsg.ShareAcknowledgeRequest{GroupID: &m.group, MemberID: &m.id, ShareSessionEpoch: epoch, IsRenewAck: len(as) > 0 && as[0].typ == ackRenew}
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
		finish(as, nil, err)
		return err
	}
	s.bump()
	codes := map[int32]int16{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			codes[p.Partition] = p.ErrorCode
		}
	}
	finish(as, codes, nil)
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
		s.mu.Lock()
		if s.epoch != 0 {
			errs = append(errs, m.acknowledge(s, s.take(), -1))
		}
		s.mu.Unlock()
	}
	return errors.Join(append(errs, m.heartbeat(ctx, true))...)
}
