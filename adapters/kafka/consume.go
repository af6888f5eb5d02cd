package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// sub is one consumer-group member on one topic. ReceiveBatch reads
// sarama's claim channels itself; SendAcks records offsets (no I/O) and the
// commit loop commits each partition's contiguous acknowledged prefix.
type sub struct {
	c           *conn
	spec        ports.SubscriptionSpec
	phys, group string
	limit       int           // records pulled and not handed out
	retention   time.Duration // older records are skipped (0: none)

	client, commitClient sarama.Client // commits get their own connection: not behind a Fetch long poll
	cg                   sarama.ConsumerGroup
	cancel               context.CancelFunc // ends the consume loop
	loops                sync.WaitGroup
	established          chan struct{} // closed by the first Setup
	setupErr, failed     chan error    // a failed first session; a later one
	wake, kick, stop     chan struct{} // records or claims changed; commit now; Close
	recorded             atomic.Int64  // offsets recorded since the last commit

	fence sync.Mutex // a revoked partition is never committed

	mu     sync.Mutex
	parts  map[int32]*partition // the session's partitions
	claims []*partition         // those with a channel; replaced, never changed
	ready  []driver.Record      // to hand out
	held   int                  // records waiting behind their key
	out    []driver.Record      // reused by ReceiveBatch
	batch  []fetched
	cases  []reflect.SelectCase

	closeOnce sync.Once
	closeErr  error
	closed    chan struct{}
}

var _ driver.AckFlusher = (*sub)(nil)

// partition is one partition claimed in one generation.
type partition struct {
	topic           string // physical
	id, gen         int32
	member          string
	idText, genText string
	msgs            <-chan *sarama.ConsumerMessage // set by ConsumeClaim, under sub.mu

	mu        sync.Mutex
	revoked   bool
	offs      kit.Offsets // fetched, done in any order
	committed int64       // accepted by the broker (-1: none)
	hold      kit.KeyHold[driver.Record]
	names     map[string]string // header names, interned
}

type handle struct {
	p   *partition
	off int64
	key string
}

type fetched struct {
	p  *partition
	cm *sarama.ConsumerMessage
}

// Subscribe returns once the group session is established and its start
// offsets committed: a message sent after it returns is delivered.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	s := &sub{c: c, spec: spec, phys: c.names.topic(spec.Topic), group: c.names.group(spec, spec.Instance),
		limit: spec.InFlight * c.opts.Buffer, established: make(chan struct{}), setupErr: make(chan error, 1),
		failed: make(chan error, 1), wake: make(chan struct{}, 1), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), closed: make(chan struct{})}
	if err := c.ensureTopic(ctx, s.phys); err != nil {
		return nil, err
	}
	s.retention = c.retention(spec.Topic, s.phys)
	if err := c.checkInstanceFree(spec, s.group); err != nil {
		return nil, err
	}
	conf := c.opts.config("consumer", spec.InFlight)
	if spec.Start == ports.StartEarliest {
		conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	}
	if spec.SingleActive {
		conf.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{newSingleActive()}
	}
	var err error
	if s.client, err = sarama.NewClient(c.opts.Brokers, conf); err == nil {
		if s.commitClient, err = sarama.NewClient(c.opts.Brokers, conf); err != nil {
			_ = s.client.Close()
		} else if s.cg, err = sarama.NewConsumerGroupFromClient(s.group, s.client); err != nil {
			_, _ = s.client.Close(), s.commitClient.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: consumer group %s: %w", s.group, err)
	}
	loop, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.loops.Add(2)
	go s.consumeLoop(loop)
	go s.commitLoop()
	select {
	case <-s.established:
		return s, nil
	case err = <-s.setupErr:
		err = fmt.Errorf("kafka: join group %s: %w", s.group, err)
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = s.Close(context.Background())
	return nil, err
}

// consumeLoop runs one session after the other; a failed one is returned
// by ReceiveBatch and rejoined after a backoff.
func (s *sub) consumeLoop(ctx context.Context) {
	defer s.loops.Done()
	rejoin := kit.DefaultBackoff
	rejoin.Initial = s.c.opts.CommitRetry
	for failures := 0; ; failures++ {
		err := s.cg.Consume(ctx, []string{s.phys}, (*groupHandler)(s))
		if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return
		}
		if err == nil {
			failures = -1
			continue
		}
		to := s.setupErr
		select {
		case <-s.established:
			to = s.failed
		default:
		}
		select {
		case to <- &sessionError{fmt.Errorf("kafka: group %s session: %w", s.group, err)}:
		default:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(rejoin.Delay(failures)):
		}
	}
}

// sessionError is a failed group session (the consume loop rejoins).
type sessionError struct{ error }

func (e *sessionError) Unwrap() error { return e.error }

// commitLoop commits on the interval and threshold; a failure is retried
// on the next round.
func (s *sub) commitLoop() {
	defer s.loops.Done()
	tick := time.NewTicker(s.c.opts.CommitInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-s.kick:
		case <-s.stop:
			return
		}
		_ = s.commit(s.partitions())
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ReceiveBatch pulls what the claims hold and returns up to max ready
// records; with none it waits on the claims, wake, a failure and ctx.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	var first *fetched
	for {
		s.mu.Lock()
		claims, room := s.claims, s.limit-s.held-len(s.ready)
		s.mu.Unlock()
		if first != nil || room > 0 {
			s.pull(claims, first, room)
			first = nil
		}
		s.mu.Lock()
		n := min(max, len(s.ready))
		out := append(s.out[:0], s.ready[:n]...)
		clear(s.ready[:n])
		s.ready = s.ready[n:]
		s.mu.Unlock()
		if n > 0 {
			s.out = out
			return out, nil
		}
		cases := append(s.cases[:0], recv(ctx.Done()), recv(s.wake), recv(s.failed))
		for _, p := range claims {
			if room > 0 {
				cases = append(cases, recv(p.msgs))
			}
		}
		s.cases = cases
		switch i, v, ok := reflect.Select(cases); {
		case i == 0:
			return nil, ctx.Err()
		case i == 2:
			return nil, v.Interface().(error)
		case i == 1:
		case !ok:
			s.drained(claims[i-3])
		default:
			first = &fetched{claims[i-3], v.Interface().(*sarama.ConsumerMessage)}
		}
	}
}

func recv[T any](ch <-chan T) reflect.SelectCase {
	return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
}

// pull takes up to room records besides first from the claims without
// waiting and accepts them oldest first across partitions (a walk sees
// the originals before the copies it put back).
func (s *sub) pull(claims []*partition, first *fetched, room int) {
	batch := s.batch[:0]
	if first != nil {
		batch = append(batch, *first)
	}
	for _, p := range claims {
	drain:
		for len(batch) < room {
			select {
			case cm, ok := <-p.msgs:
				if !ok {
					s.drained(p)
					break drain
				}
				batch = append(batch, fetched{p, cm})
			default:
				break drain
			}
		}
	}
	sort.SliceStable(batch, func(i, j int) bool { return batch[i].cm.Timestamp.Before(batch[j].cm.Timestamp) })
	now := time.Now()
	for _, f := range batch {
		s.accept(f.p, f.cm, now)
	}
	clear(batch)
	s.batch = batch
}

func (s *sub) drained(p *partition) {
	s.mu.Lock()
	p.msgs = nil
	s.rebuildLocked()
	s.mu.Unlock()
}

func (s *sub) rebuildLocked() {
	s.claims = slices.DeleteFunc(slices.Collect(maps.Values(s.parts)), func(p *partition) bool { return p.msgs == nil })
	signal(s.wake)
}

// accept logs a record and readies it. One outside the key filter or older
// than the retention (Kafka deletes segments late) is done at once; one
// whose key has a record out waits; one of a revoked partition is dropped.
func (s *sub) accept(p *partition, cm *sarama.ConsumerMessage, now time.Time) {
	r := decode(cm, s.spec.Topic, p, now)
	h := &handle{p: p, off: cm.Offset, key: r.Message.Key}
	r.Handle = h
	skip := !s.spec.MatchKey(h.key) || (s.retention > 0 && !cm.Timestamp.IsZero() && now.Sub(cm.Timestamp) > s.retention) ||
		s.foreignCopy(r.Message.Headers)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked {
		return
	}
	p.offs.Add(cm.Offset, skip)
	if skip {
		s.recorded.Add(1)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.hold.Admit(h.key, r) {
		s.ready = append(s.ready, r)
	} else {
		s.held++
	}
}

// SendAcks records offsets (no I/O). If a partition of theirs was revoked
// it records none and returns driver.ErrRecordsLost: the new owner
// redelivers them.
func (s *sub) SendAcks(_ context.Context, handles []any) error {
	for _, x := range handles {
		p := x.(*handle).p
		p.mu.Lock()
		revoked := p.revoked
		p.mu.Unlock()
		if revoked {
			return fmt.Errorf("kafka: partition %s/%d revoked (generation %d): %w", p.topic, p.id, p.gen, driver.ErrRecordsLost)
		}
	}
	for _, x := range handles {
		h := x.(*handle)
		if next, ok := h.p.ack(h); ok {
			s.mu.Lock()
			s.ready = append(s.ready, next)
			s.held--
			s.mu.Unlock()
			signal(s.wake)
		}
	}
	if s.recorded.Add(int64(len(handles))) >= int64(s.c.opts.CommitThreshold) {
		signal(s.kick)
	}
	return nil
}

// ack marks h's offset done and returns the next record of its key.
func (p *partition) ack(h *handle) (driver.Record, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked {
		return driver.Record{}, false
	}
	p.offs.Done(h.off)
	return p.hold.Release(h.key)
}

// FlushAcks commits what was recorded, retrying every CommitRetry.
func (s *sub) FlushAcks(ctx context.Context) error {
	for {
		err := s.commit(s.partitions())
		if err == nil {
			return nil
		}
		select {
		case <-time.After(s.c.opts.CommitRetry):
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
	}
}

func (s *sub) partitions() []*partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.parts))
}

// commit sends one OffsetCommit per generation for the moved partitions
// of ps, under the fence.
func (s *sub) commit(ps []*partition) error {
	s.fence.Lock()
	defer s.fence.Unlock()
	s.recorded.Store(0)
	reqs := map[int32]*sarama.OffsetCommitRequest{}
	moved := map[*partition]int64{}
	for _, p := range ps {
		p.mu.Lock()
		if !p.revoked && p.offs.Mark() > p.committed {
			moved[p] = p.offs.Mark()
		}
		p.mu.Unlock()
		if pos, ok := moved[p]; ok {
			if reqs[p.gen] == nil {
				reqs[p.gen] = sarama.NewOffsetCommitRequest(s.commitClient.Config(), s.group)
				reqs[p.gen].ConsumerGroupGeneration, reqs[p.gen].ConsumerID = p.gen, p.member
			}
			reqs[p.gen].AddBlock(p.topic, p.id, pos, 0, "")
		}
	}
	var errs []error
	for gen, req := range reqs {
		resp, err := commitOffsets(s.commitClient, s.group, req)
		if err != nil {
			errs = append(errs, fmt.Errorf("kafka: commit %s: %w", s.group, err))
			continue
		}
		for p, pos := range moved {
			if kerr := resp.Errors[p.topic][p.id]; p.gen != gen {
				continue
			} else if kerr != sarama.ErrNoError {
				errs = append(errs, fmt.Errorf("kafka: commit %s %s/%d: %w", s.group, p.topic, p.id, kerr))
				continue
			}
			p.mu.Lock()
			p.committed = max(p.committed, pos)
			p.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// release commits what ps recorded (best effort), then revokes them:
// nothing of them is committed or handed out afterwards.
func (s *sub) release(ps ...*partition) {
	_ = s.commit(ps)
	s.fence.Lock()
	defer s.fence.Unlock()
	dropped := 0
	for _, p := range ps {
		p.mu.Lock()
		p.revoked = true
		dropped += p.hold.Waiting()
		p.hold, p.offs = kit.KeyHold[driver.Record]{}, kit.Offsets{}
		p.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		if s.parts[p.id] == p {
			delete(s.parts, p.id)
		}
	}
	s.held -= dropped
	s.ready = slices.DeleteFunc(s.ready, func(r driver.Record) bool { return slices.Contains(ps, r.Handle.(*handle).p) })
	s.rebuildLocked()
}

type groupHandler sub

// Setup commits the start offset of every claimed partition without a
// commit, so that what is sent while every member is down is kept.
func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	s := (*sub)(h)
	ids := sess.Claims()[s.phys]
	parts := make(map[int32]*partition, len(ids))
	if len(ids) > 0 {
		committed, err := committedOffsets(s.commitClient, s.group, s.phys, ids)
		if err != nil {
			return err
		}
		at := sarama.OffsetNewest
		if s.c.opts.StartFrom == StartOldest || s.spec.Start == ports.StartEarliest {
			at = sarama.OffsetOldest
		}
		for _, id := range ids {
			start := committed[id]
			if start < 0 {
				if start, err = s.commitClient.GetOffset(s.phys, id, at); err != nil {
					return err
				}
				sess.MarkOffset(s.phys, id, start, "") // the claim starts here
			}
			parts[id] = &partition{topic: s.phys, id: id, gen: sess.GenerationID(), member: sess.MemberID(),
				idText: strconv.Itoa(int(id)), genText: strconv.Itoa(int(sess.GenerationID())),
				offs: kit.NewOffsets(start), committed: committed[id]}
		}
		if err := s.commit(slices.Collect(maps.Values(parts))); err != nil {
			return fmt.Errorf("kafka: group %s: committing start offsets failed: %w", s.group, err)
		}
	}
	s.mu.Lock()
	s.parts = parts
	s.mu.Unlock()
	select {
	case <-s.established:
	default:
		close(s.established)
	}
	return nil
}

// ConsumeClaim hands the channel to ReceiveBatch until the session ends.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	s := (*sub)(h)
	s.mu.Lock()
	p := s.parts[claim.Partition()]
	if p != nil {
		p.msgs = claim.Messages()
		s.rebuildLocked()
	}
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("kafka: claim %s/%d without a partition", claim.Topic(), claim.Partition())
	}
	<-sess.Context().Done()
	s.release(p)
	return nil
}

func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error {
	s := (*sub)(h)
	s.release(s.partitions()...)
	return nil
}

// committedOffsets fetches group's commits on phys's partitions ids (-1:
// none).
func committedOffsets(client sarama.Client, group, phys string, ids []int32) (map[int32]int64, error) {
	coord, err := client.Coordinator(group)
	if err != nil {
		return nil, err
	}
	resp, err := coord.FetchOffset(sarama.NewOffsetFetchRequest(client.Config().Version, group, map[string][]int32{phys: ids}))
	if err != nil {
		_ = client.RefreshCoordinator(group)
		return nil, err
	}
	out := make(map[int32]int64, len(ids))
	for _, id := range ids {
		out[id] = -1
		if b := resp.GetBlock(phys, id); b != nil && b.Err != sarama.ErrNoError {
			return nil, b.Err
		} else if b != nil {
			out[id] = b.Offset
		}
	}
	return out, nil
}

func commitOffsets(client sarama.Client, group string, req *sarama.OffsetCommitRequest) (*sarama.OffsetCommitResponse, error) {
	coord, err := client.Coordinator(group)
	var resp *sarama.OffsetCommitResponse
	if err == nil {
		resp, err = coord.CommitOffset(req)
	}
	if err != nil {
		_ = client.RefreshCoordinator(group)
	}
	return resp, err
}

// Close commits what was acknowledged, leaves the group, deletes a
// Broadcast group without InstanceTTL and closes the clients.
func (s *sub) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		go func() {
			defer close(s.closed)
			s.release(s.partitions()...)
			s.cancel()
			errs := []error{s.cg.Close()}
			close(s.stop)
			s.loops.Wait()
			if s.spec.Mode == ports.Broadcast && s.spec.InstanceTTL == 0 {
				if err := s.c.admin.DeleteConsumerGroup(s.group); err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
					errs = append(errs, fmt.Errorf("delete broadcast group: %w", err))
				}
			}
			if err := errors.Join(append(errs, s.client.Close(), s.commitClient.Close())...); err != nil {
				s.closeErr = fmt.Errorf("kafka: stop %s: %w", s.group, err)
			}
		}()
	})
	select {
	case <-s.closed:
		return s.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}
