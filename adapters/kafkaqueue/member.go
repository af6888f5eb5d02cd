package kafkaqueue

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
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

	// report receives the failures of deferred acknowledgements (acks
	// whose SendAcks returned before a request carried them).
	report func(error)

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
	gen   atomic.Uint32  // counts resets (read without mu by SendAcks)
	in    map[int32]bool // partitions in the session

	pmu     sync.Mutex
	pending []*acks

	dec decoder // the last answer's records (s.mu)
}

// reset forgets the session: a new one opens with the next request.
func (s *session) reset() {
	s.epoch = 0
	s.gen.Add(1)
	clear(s.in)
}

func (s *session) bump() { s.epoch = max(s.epoch+1, 1) }

// queue adds a to the acknowledgements the next request carries.
func (s *session) queue(a *acks) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.pending = append(s.pending, a)
}

// hasPending reports whether acknowledgements wait for a request.
func (s *session) hasPending() bool {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return len(s.pending) > 0
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
// Deferred acks have no caller waiting: their failure is reported.
type acks struct {
	hs       []*handle
	typ      int8
	done     bool
	deferred bool
	err      error
	fin      chan struct{} // deferred acks: closed when done
}

// handle is a record's settlement handle.
type handle struct {
	s         *session
	gen       uint32
	partition int32
	offset    int64

	until atomic.Int64 // when its lock ends, as far as the member knows (UnixNano)
	link  link         // its place in the subscription's holds

	msg          ports.Message // what a dead-letter copy is made of
	id           string        // BrokerID
	redeliveries int
}

// lapsed reports whether h's lock has ended by now: the broker took the
// record back.
func (h *handle) lapsed(now time.Time) bool { return now.UnixNano() >= h.until.Load() }

func newMember(cl *kgo.Client, group, topic string, wait time.Duration) *member {
	m := &member{cl: cl, group: group, topic: topic, wait: wait, id: rand.Text()[:22], report: func(error) {},
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

// acquired is one fetched record with its handle and delivery count; its
// headers are in its session's decoder until the session's next request.
type acquired struct {
	r     rawRecord
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
func (m *member) decode(s *session, resp *kmsg.ShareFetchResponse) ([]acquired, error) {
	gen := s.gen.Load()
	s.dec.reset()
	var (
		out  []acquired
		gaps []*handle
		perr error
		hs   []handle // the handles of this response, allocated at once
	)
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
			n := 0
			for _, ar := range rp.AcquiredRecords {
				n += int(ar.LastOffset - ar.FirstOffset + 1)
			}
			if len(hs) < n {
				hs = make([]handle, max(n, 64))
			}
			out = slices.Grow(out, n)
			last := rp.AcquiredRecords[len(rp.AcquiredRecords)-1].LastOffset
			recs := s.dec.partition(m.topic, rp.Partition, batchesUpTo(rp.Records, last), rp.AcquiredRecords[0].FirstOffset, last)
			j := 0 // recs and the acquired ranges are in offset order
			for _, ar := range rp.AcquiredRecords {
				for off := ar.FirstOffset; off <= ar.LastOffset; off++ {
					h := &hs[0]
					hs = hs[1:]
					h.s, h.gen, h.partition, h.offset = s, gen, rp.Partition, off
					if j < len(recs) && recs[j].offset < off {
						j, _ = slices.BinarySearchFunc(recs, off, func(r rawRecord, off int64) int { return cmp.Compare(r.offset, off) })
					}
					if j < len(recs) && recs[j].offset == off {
						out = append(out, acquired{r: recs[j], h: h, count: int(ar.DeliveryCount)})
						j++
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

// batchesUpTo cuts the record batches of b after the last one that starts
// at or before offset last: the broker sends whole batches, and those
// after the last acquired offset hold no acquired record (they would be
// decoded for nothing). A batch it cannot read is left to the decoder.
func batchesUpTo(b []byte, last int64) []byte {
	at := 0
	for at+12 <= len(b) {
		size := int(int32(binary.BigEndian.Uint32(b[at+8:])))
		if int64(binary.BigEndian.Uint64(b[at:])) > last {
			return b[:at]
		}
		if size < 0 || at+12+size > len(b) {
			return b
		}
		at += 12 + size
	}
	return b
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

// accept queues the Accept of hs on their sessions, deferred: the next
// request of each session carries it (a ShareFetch, or a ShareAcknowledge
// of the subscription's flush) and a failure is reported. A record whose
// session was reset or whose lock has lapsed is not queued: the broker
// took it back, and the error wraps driver.ErrRecordsLost.
func (m *member) accept(hs []*handle, now time.Time) error {
	var (
		a    *acks
		lost int
	)
	for _, h := range hs {
		if h.gen != h.s.gen.Load() || h.lapsed(now) {
			lost++
			continue
		}
		if a != nil && a.hs[0].s != h.s { // another session: rare (one leader each)
			a.hs[0].s.queue(a)
			a = nil
		}
		if a == nil {
			a = &acks{typ: ackAccept, deferred: true, hs: make([]*handle, 0, len(hs)), fin: make(chan struct{})}
		}
		a.hs = append(a.hs, h)
	}
	if a != nil {
		a.hs[0].s.queue(a)
	}
	if lost > 0 {
		return fmt.Errorf("%w: %d record(s) whose lock lapsed or whose share session closed", errLost, lost)
	}
	return nil
}

// flush completes the deferred accepts pending now on every session: a
// session with no request in flight sends them on a ShareAcknowledge of
// their own; on a busy one they ride on the request in flight or the
// next one, and flush waits for their answer rather than for the session
// (whose next request may be a long poll), trying the session again every
// ackLinger (a renewal in flight carries no accept). It returns the
// failures of the accepts it sent; the others are reported.
func (m *member) flush(ctx context.Context) error {
	m.mu.Lock()
	sessions := slices.Collect(maps.Values(m.sessions))
	m.mu.Unlock()
	var errs []error
	for _, s := range sessions {
		s.pmu.Lock()
		wait := slices.Clone(s.pending)
		s.pmu.Unlock()
		for _, a := range wait {
			for a.fin != nil {
				select {
				case <-a.fin:
				default:
					if s.mu.TryLock() { // no request in flight: a is answered, or pending
						as := s.take()
						for _, a := range as {
							a.deferred = false // this call returns the failure
						}
						_ = m.acknowledge(s, as, s.epoch)
						s.mu.Unlock()
						for _, a := range as {
							errs = append(errs, a.err)
						}
						continue
					}
					t := time.NewTimer(ackLinger)
					select {
					case <-a.fin:
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return errors.Join(append(errs, ctx.Err())...)
					}
					t.Stop()
					continue
				}
				break
			}
		}
	}
	return errors.Join(errs...)
}

// pending reports whether acknowledgements wait on a session.
func (m *member) pending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sessions {
		if s.hasPending() {
			return true
		}
	}
	return false
}

// batch is an acknowledgement batch: contiguous offsets of one partition
// acknowledged with one type.
type batch = kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch

// ackTypes holds the one-type AcknowledgeTypes of each acknowledge type,
// shared by every batch (the request only reads them).
var ackTypes = [...][]int8{{ackGap}, {ackAccept}, {ackRelease}, {ackReject}, {ackRenew}}

// ranges returns the batches of the handles of as by partition: runs of
// contiguous offsets acknowledged with one type. A handle of an earlier
// session is lost (an error on its acks).
func ranges(s *session, as []*acks) map[int32][]batch {
	type one struct {
		p   int32
		off int64
		typ int8
	}
	n := 0
	for _, a := range as {
		n += len(a.hs)
	}
	all := make([]one, 0, n)
	gen := s.gen.Load()
	for _, a := range as {
		lost := 0
		for _, h := range a.hs {
			if h.gen != gen || s.epoch == 0 {
				lost++
			} else {
				all = append(all, one{h.partition, h.offset, a.typ})
			}
		}
		if lost > 0 {
			a.err = fmt.Errorf("%w: %d record(s) of a closed share session", errLost, lost)
		}
	}
	slices.SortFunc(all, func(x, y one) int {
		return cmp.Or(cmp.Compare(x.p, y.p), cmp.Compare(x.off, y.off))
	})
	out := map[int32][]batch{}
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j].p == all[i].p && all[j].off == all[j-1].off+1 && all[j].typ == all[i].typ {
			j++
		}
		out[all[i].p] = append(out[all[i].p], batch{FirstOffset: all[i].off, LastOffset: all[j-1].off, AcknowledgeTypes: ackTypes[all[i].typ]})
		i = j
	}
	return out
}

// finish completes as (see finish) and reports the failures of the
// deferred ones.
func (m *member) finish(as []*acks, codes map[int32]int16, err error) {
	finish(as, codes, err)
	for _, a := range as {
		if a.deferred && a.err != nil {
			m.report(fmt.Errorf("kafkaqueue: deferred accept of %d record(s) failed (the broker redelivers them): %w", len(a.hs), a.err))
		}
	}
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
		if a.fin != nil {
			close(a.fin)
		}
	}
}

// acknowledge sends as on a ShareAcknowledge of their own (s locked);
// epoch -1 closes the session (the broker releases what it holds).
func (m *member) acknowledge(s *session, as []*acks, epoch int32) error {
	acked := ranges(s, as)
	if len(acked) == 0 && epoch != -1 {
		m.finish(as, nil, nil)
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
		s.mu.Lock()
		if s.epoch != 0 {
			errs = append(errs, m.acknowledge(s, s.take(), -1))
		}
		s.mu.Unlock()
	}
	return errors.Join(append(errs, m.heartbeat(ctx, true))...)
}
