package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/ports"
)

// groupHandler is the sarama.ConsumerGroupHandler of a subscription. Each
// session (generation) gets fresh partition trackers in Setup; a claim's
// tracker is revoked the moment its ConsumeClaim returns (the session
// ended or the claim was taken away), and Cleanup revokes any left.
type groupHandler struct {
	s         *subscription
	setupDone atomic.Bool

	mu    sync.Mutex
	parts map[int32]*partition
}

// Setup creates the trackers of the claimed partitions and commits the
// start offset of every partition the group has no commit for yet.
func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	s := h.s
	claims := sess.Claims()[s.phys]
	parts := make(map[int32]*partition, len(claims))
	if len(claims) > 0 {
		committed, err := s.committedOffsets(claims)
		if err != nil {
			return err
		}
		for _, id := range claims {
			c := committed[id]
			start := c
			if c < 0 {
				if start, err = s.startOffset(id); err != nil {
					return err
				}
				sess.MarkOffset(s.phys, id, start, "") // the claim starts here
			}
			parts[id] = newPartition(s.phys, id, sess.GenerationID(), sess.MemberID(), start, c)
		}
		list := make([]*partition, 0, len(parts))
		for _, p := range parts {
			list = append(list, p)
		}
		s.commit.track(list...)
		if err := s.commit.round(); err != nil {
			s.unbuffer(s.commit.revoke(list...))
			return fmt.Errorf("kafka: group %s: committing start offsets failed: %w", s.group, err)
		}
	}
	h.mu.Lock()
	h.parts = parts
	h.mu.Unlock()
	if !h.setupDone.Swap(true) {
		close(s.established)
	}
	return nil
}

// Cleanup commits what the session's partitions recorded and fences them.
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	parts := h.parts
	h.parts = nil
	h.mu.Unlock()
	list := make([]*partition, 0, len(parts))
	for _, p := range parts {
		list = append(list, p)
	}
	h.s.unbuffer(h.s.commit.release(list...))
	return nil
}

// ConsumeClaim feeds one partition's records to the subscription until
// the session ends or the claim is closed, then revokes the partition.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	h.mu.Lock()
	p := h.parts[claim.Partition()]
	h.mu.Unlock()
	if p == nil {
		return fmt.Errorf("kafka: claim %s/%d without a tracker", claim.Topic(), claim.Partition())
	}
	s := h.s
	defer func() { s.unbuffer(s.commit.release(p)) }() // commit what it recorded, then fence
	ctx := sess.Context()
	msgs := claim.Messages()
	var avail []*record
	for {
		if !s.waitSpace(ctx) {
			return nil
		}
		var cm *sarama.ConsumerMessage
		select {
		case <-ctx.Done():
			s.unbuffer(1)
			return nil
		case m, ok := <-msgs:
			if !ok {
				s.unbuffer(1)
				return nil
			}
			cm = m
		}
		// Take what else the claim has fetched already, as far as the
		// buffer has room, and make the lot available at once: one lock
		// and one wake-up of Receive per batch, not per record (and one
		// clock read: the batch is received now).
		now := time.Now()
		avail = s.accept(p, cm, avail[:0], now)
		closed := false
		if extra := s.tryReserve(claimBatch - 1); extra > 0 {
			took := 0
		drain:
			for took < extra {
				select {
				case m, ok := <-msgs:
					if !ok {
						closed = true
						break drain
					}
					took++
					avail = s.accept(p, m, avail, now)
				default:
					break drain
				}
			}
			if took < extra {
				s.unbuffer(extra - took)
			}
		}
		s.makeAvailable(avail...)
		clear(avail)
		if closed {
			return nil
		}
	}
}

// claimBatch bounds the records a claim takes from its fetched messages
// at once.
const claimBatch = 64

// accept takes one fetched record into the partition tracker and appends
// it to avail when it may be made available now. The caller reserved its
// buffer slot. now is when the claim took it.
func (s *subscription) accept(p *partition, cm *sarama.ConsumerMessage, avail []*record, now time.Time) []*record {
	r := &record{s: s, p: p, offset: cm.Offset, dec: decode(cm, s.topic, p.names), received: now}
	ok, live := p.add(r)
	if !live {
		s.unbuffer(1)
		return avail
	}
	if !s.spec.MatchKey(r.dec.msg.Key) || s.expired(cm.Timestamp, now) {
		// Not for this subscription, or older than the topic's retention
		// (Kafka deletes whole segments, late): settled without handling.
		s.unbuffer(1)
		if ok {
			p.mu.Lock()
			r.state = stateOut
			p.mu.Unlock()
			if next, err := p.complete(r, ports.Ack); err == nil {
				if next != nil {
					s.makeAvailable(next)
				}
				s.commit.record(1)
			}
		}
		return avail
	}
	r.facts = r.makeFacts()
	if ok {
		avail = append(avail, r)
	}
	return avail
}

// committedOffsets fetches the group's committed offsets (-1: none).
func (s *subscription) committedOffsets(ids []int32) (map[int32]int64, error) {
	coord, err := s.commitClient.Coordinator(s.group)
	if err != nil {
		return nil, err
	}
	req := sarama.NewOffsetFetchRequest(s.commitClient.Config().Version, s.group, map[string][]int32{s.phys: ids})
	resp, err := coord.FetchOffset(req)
	if err != nil {
		_ = s.commitClient.RefreshCoordinator(s.group)
		return nil, err
	}
	out := make(map[int32]int64, len(ids))
	for _, id := range ids {
		b := resp.GetBlock(s.phys, id)
		if b == nil {
			out[id] = -1
			continue
		}
		if b.Err != sarama.ErrNoError {
			return nil, b.Err
		}
		out[id] = b.Offset
	}
	return out, nil
}

// startOffset is where a group without a commit starts on partition id.
func (s *subscription) startOffset(id int32) (int64, error) {
	at := sarama.OffsetNewest
	if s.a.cfg.StartFrom == StartOldest || s.spec.Start == ports.StartEarliest {
		at = sarama.OffsetOldest
	}
	return s.commitClient.GetOffset(s.phys, id, at)
}

// stopRun carries out Stop once.
func (s *subscription) stopRun() {
	defer close(s.stopDone)
	s.mu.Lock()
	s.stopped = true
	s.ready = nil
	close(s.readyCh)
	s.readyCh = make(chan struct{})
	s.notifySpaceLocked()
	s.mu.Unlock()

	// Commit what was settled before Stop, then fence every partition:
	// from here on nothing is committed, and nothing unsettled was.
	s.unbuffer(s.commit.releaseAll())

	var errs []error
	s.cancel()
	if err := s.cg.Close(); err != nil {
		errs = append(errs, err)
	}
	s.loops.Wait()
	s.commit.close()
	s.sched.Stop()
	if s.spec.Mode == ports.Broadcast && s.spec.InstanceTTL == 0 {
		if err := s.a.admin.DeleteConsumerGroup(s.group); err != nil && err != sarama.ErrGroupIDNotFound {
			errs = append(errs, fmt.Errorf("kafka: delete broadcast group %s: %w", s.group, err))
		}
	}
	if err := s.client.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := s.commitClient.Close(); err != nil {
		errs = append(errs, err)
	}
	s.a.forget(s)
	s.errs.Close()
	if len(errs) > 0 {
		s.stopErr = fmt.Errorf("kafka: stop %s: %w", s.group, errors.Join(errs...))
	}
}

// Stop leaves the group without committing anything unsettled. It waits
// until done or ctx is done (the stop goes on in the background then).
func (s *subscription) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { go s.stopRun() })
	select {
	case <-s.stopDone:
		return s.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}
