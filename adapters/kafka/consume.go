package kafka

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// sub is the driver subscription: one consumer-group member on one topic.
// ReceiveBatch reads the claims' message channels of sarama itself (no
// goroutine of the adapter between them); SendAcks records offsets (no
// I/O) and the gap-free prefix of every partition is committed every
// Options.CommitInterval, when Options.CommitThreshold offsets were
// recorded, when a partition is revoked, on FlushAcks and on Close.
type sub struct {
	c         *conn
	spec      ports.SubscriptionSpec
	phys      string
	group     string
	limit     int // bound on the records held behind their key
	retention time.Duration

	client       sarama.Client // the consumer group's (fetches, group protocol)
	commitClient sarama.Client // commits and offset look-ups
	cg           sarama.ConsumerGroup

	cancel      context.CancelFunc // stops the consume loop
	loops       sync.WaitGroup
	established chan struct{} // closed after the first session's Setup
	setupErr    chan error    // first Consume failure before Setup
	failed      chan error    // cap 1: a session failure for ReceiveBatch
	wake        chan struct{} // cap 1: records were released or the claims changed
	kick        chan struct{} // cap 1: the commit threshold was reached
	stop        chan struct{} // closed by Close: ends the commit loop
	recorded    atomic.Int64  // offsets recorded since the last commit round

	fence sync.Mutex // held for a commit round and to revoke partitions

	mu     sync.Mutex
	parts  map[int32]*partition // the current session's partitions
	claims []*partition         // those with a channel to read; replaced, never changed
	ready  []driver.Record      // records pulled or released by an ack, to hand out
	held   int                  // records waiting behind their key

	out   []driver.Record      // ReceiveBatch's result, reused
	batch []fetched            // pull's batch, reused
	cases []reflect.SelectCase // ReceiveBatch's wait, reused

	stopOnce sync.Once
	stopErr  error
	stopDone chan struct{}
}

var (
	_ driver.Subscription = (*sub)(nil)
	_ driver.AckFlusher   = (*sub)(nil)
)

// partition is one partition claimed in one session (generation); a
// partition claimed again later is a new value.
type partition struct {
	topic           string // physical
	id, gen         int32
	member          string
	idText, genText string
	msgs            <-chan *sarama.ConsumerMessage // set by ConsumeClaim, under sub.mu

	mu        sync.Mutex
	revoked   bool
	log       []entry // fetched offsets not below mark, in order; log[head:] is live
	head      int
	mark      int64 // commit position: every fetched offset below it is done
	committed int64 // the last position the broker accepted (-1: none)
	// keys maps a key with a record out to the records of the key waiting
	// behind it, in offset order.
	keys map[string][]driver.Record
}

type entry struct {
	off  int64
	done bool
}

// handle is a record's driver handle.
type handle struct {
	p   *partition
	off int64
	key string
}

// Subscribe joins the consumer group of spec and returns once the group
// session is established and the start offsets of the claimed partitions
// are committed, so a message sent after it returns is delivered.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	s := &sub{
		c: c, spec: spec, phys: c.names.topic(spec.Topic), group: c.names.group(spec, spec.Instance),
		limit:       spec.InFlight * c.opts.Buffer,
		established: make(chan struct{}), setupErr: make(chan error, 1), failed: make(chan error, 1),
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1), stop: make(chan struct{}), stopDone: make(chan struct{}),
	}
	if err := c.ensureTopic(ctx, s.phys); err != nil {
		return nil, err
	}
	s.retention = c.retention(spec.Topic, s.phys)
	if err := c.checkInstanceFree(spec, s.group); err != nil { // instance.go
		return nil, err
	}
	conf := c.opts.consumerConfig(spec.InFlight)
	if spec.Start == ports.StartEarliest {
		conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	}
	if spec.SingleActive {
		conf.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{newSingleActive()}
	}
	var err error
	if s.client, err = sarama.NewClient(c.opts.Brokers, conf); err != nil {
		return nil, fmt.Errorf("kafka: consumer client: %w", err)
	}
	// Commits and offset look-ups get their own connections: on the
	// consumer's connection an OffsetCommit waits behind the Fetch long
	// poll in flight (a broker answers one connection's requests in order).
	if s.commitClient, err = sarama.NewClient(c.opts.Brokers, conf); err != nil {
		_ = s.client.Close()
		return nil, fmt.Errorf("kafka: commit client: %w", err)
	}
	if s.cg, err = sarama.NewConsumerGroupFromClient(s.group, s.client); err != nil {
		_ = s.client.Close()
		_ = s.commitClient.Close()
		return nil, fmt.Errorf("kafka: consumer group %s: %w", s.group, err)
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.loops.Add(2)
	go s.consumeLoop(loopCtx)
	go s.commitLoop()
	select {
	case <-s.established:
		return s, nil
	case err := <-s.setupErr:
		_ = s.Close(context.Background())
		return nil, fmt.Errorf("kafka: join group %s: %w", s.group, err)
	case <-ctx.Done():
		_ = s.Close(context.Background())
		return nil, ctx.Err()
	}
}

// consumeLoop runs group sessions until the subscription stops (sarama
// needs one caller of Consume; each rebalance ends a session). A failed
// session is handed to ReceiveBatch, which returns it for the portable
// layer to report, and rejoined after Options.Rejoin.
func (s *sub) consumeLoop(ctx context.Context) {
	defer s.loops.Done()
	h := &groupHandler{s}
	for failures := 0; ; {
		err := s.cg.Consume(ctx, []string{s.phys}, h)
		if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return
		}
		if err == nil {
			failures = 0
			continue
		}
		select {
		case <-s.established:
			select {
			case s.failed <- &sessionError{group: s.group, err: err}:
			default:
			}
		default:
			select {
			case s.setupErr <- err:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.c.opts.Rejoin.Delay(failures)):
		}
		failures++
	}
}

// sessionError is a failed group session; the consume loop rejoins, so
// it is retryable whatever its cause (but refused credentials).
type sessionError struct {
	group string
	err   error
}

func (e *sessionError) Error() string {
	return fmt.Sprintf("kafka: group %s session: %v (rejoining)", e.group, e.err)
}

func (e *sessionError) Unwrap() error { return e.err }

// commitLoop commits on the interval and when the threshold is reached.
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
		_ = s.round() // a failure is retried next round; a lost commit means a redelivery
	}
}

func (s *sub) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ReceiveBatch returns up to max records: first those held in ready (pulled
// earlier, or released by the acknowledgement of an earlier record of
// their key), then what the claims' channels hold, waiting on them (and on
// a release, a new claim, a session failure and ctx) when none has any.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	out := s.out[:0]
	var first *fetched
	for {
		s.mu.Lock()
		n := min(max-len(out), len(s.ready))
		out = append(out, s.ready[:n]...)
		clear(s.ready[:n])
		s.ready = s.ready[n:]
		claims, room := s.claims, s.limit-s.held-len(s.ready)
		s.mu.Unlock()
		if first != nil || (len(out) < max && room > 0) {
			out = s.pull(claims, first, out, max, room)
			first = nil
		}
		if len(out) > 0 {
			s.out = out
			return out, nil
		}
		cases := append(s.cases[:0],
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.wake)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.failed)})
		for _, p := range claims {
			if room > 0 {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.msgs)})
			}
		}
		s.cases = cases
		i, v, ok := reflect.Select(cases)
		switch {
		case i == 0:
			return nil, ctx.Err()
		case i == 1:
		case i == 2:
			return nil, v.Interface().(error)
		case !ok:
			s.drained(claims[i-3])
		default:
			first = &fetched{claims[i-3], v.Interface().(*sarama.ConsumerMessage)}
		}
	}
}

// fetched is a record read from a claim's channel.
type fetched struct {
	p  *partition
	cm *sarama.ConsumerMessage
}

// pull reads what the claims' channels hold, without waiting, up to room
// records besides first, and hands them out oldest first (by timestamp,
// across partitions, as they were produced): up to max in out, the rest in
// ready for the next call.
func (s *sub) pull(claims []*partition, first *fetched, out []driver.Record, max, room int) []driver.Record {
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
	var rest []driver.Record
	for _, f := range batch {
		if len(out) < max {
			out = s.accept(f.p, f.cm, out, now)
		} else {
			rest = s.accept(f.p, f.cm, rest, now)
		}
	}
	if len(rest) > 0 {
		s.mu.Lock()
		s.ready = append(s.ready, rest...)
		s.mu.Unlock()
	}
	clear(batch)
	s.batch = batch
	return out
}

// drained drops a claim whose channel sarama closed.
func (s *sub) drained(p *partition) {
	s.mu.Lock()
	p.msgs = nil
	s.rebuildLocked()
	s.mu.Unlock()
}

// rebuildLocked replaces claims by the partitions with a channel.
func (s *sub) rebuildLocked() {
	claims := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		if p.msgs != nil {
			claims = append(claims, p)
		}
	}
	s.claims = claims
}

// accept takes one fetched record into its partition's log and appends
// it to out when it may be handed out now. A record not for this
// subscription's key filter, or older than the topic's retention (Kafka
// deletes whole segments, late), is done at once; one whose key has a
// record out waits behind it; one of a revoked partition is dropped (the
// new owner delivers it).
func (s *sub) accept(p *partition, cm *sarama.ConsumerMessage, out []driver.Record, now time.Time) []driver.Record {
	h := &handle{p: p, off: cm.Offset, key: string(cm.Key)}
	if !s.spec.MatchKey(h.key) || (s.retention > 0 && !cm.Timestamp.IsZero() && now.Sub(cm.Timestamp) > s.retention) {
		p.mu.Lock()
		if !p.revoked {
			p.log = append(p.log, entry{off: cm.Offset, done: true})
			p.advanceLocked()
		}
		p.mu.Unlock()
		s.recorded.Add(1)
		return out
	}
	r := decode(cm, s.spec.Topic, p, now)
	r.Handle = h
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked {
		return out
	}
	p.log = append(p.log, entry{off: cm.Offset})
	if h.key != "" {
		if q, busy := p.keys[h.key]; busy {
			p.keys[h.key] = append(q, r)
			s.mu.Lock()
			s.held++
			s.mu.Unlock()
			return out
		}
		p.keys[h.key] = nil
	}
	return append(out, r)
}

// advanceLocked moves mark over the done prefix of the log.
func (p *partition) advanceLocked() {
	for p.head < len(p.log) && p.log[p.head].done {
		p.mark = p.log[p.head].off + 1
		p.head++
	}
	if p.head > 64 && p.head*2 > len(p.log) {
		n := copy(p.log, p.log[p.head:])
		p.log, p.head = p.log[:n], 0
	}
}

// SendAcks records the offsets of handles as done (no I/O); the next
// commit round commits each partition's gap-free prefix. The offset of a
// partition revoked meanwhile is dropped: nothing of it is committed by
// this member, and the partition's new owner redelivers it.
func (s *sub) SendAcks(_ context.Context, handles []any) error {
	var released []driver.Record
	for _, x := range handles {
		h := x.(*handle)
		if next := h.p.ack(h); next != nil {
			released = append(released, *next)
		}
	}
	if len(released) > 0 {
		s.mu.Lock()
		s.ready = append(s.ready, released...)
		s.held -= len(released)
		s.mu.Unlock()
		s.signal(s.wake)
	}
	if s.recorded.Add(int64(len(handles))) >= int64(s.c.opts.CommitThreshold) {
		s.signal(s.kick)
	}
	return nil
}

// ack marks h's offset done, advances the mark and frees h's key; it
// returns the next record of the key.
func (p *partition) ack(h *handle) *driver.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked {
		return nil
	}
	live := p.log[p.head:]
	if i := sort.Search(len(live), func(i int) bool { return live[i].off >= h.off }); i < len(live) && live[i].off == h.off {
		live[i].done = true
		p.advanceLocked()
	}
	if h.key == "" {
		return nil
	}
	q, ok := p.keys[h.key]
	if !ok || len(q) == 0 {
		delete(p.keys, h.key)
		return nil
	}
	next := q[0]
	p.keys[h.key] = q[1:]
	return &next
}

// FlushAcks commits every offset recorded before the call, retrying a
// failed commit every Options.CommitRetry until ctx is done.
func (s *sub) FlushAcks(ctx context.Context) error {
	for {
		err := s.round()
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

// round commits every moved partition of the session.
func (s *sub) round() error {
	s.mu.Lock()
	ps := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	s.fence.Lock()
	defer s.fence.Unlock()
	return s.commitLocked(ps)
}

// commitLocked commits the moved partitions of ps in one OffsetCommit
// request per generation, with its generation and member id. The fence
// is held, so no partition is revoked meanwhile.
func (s *sub) commitLocked(ps []*partition) error {
	s.recorded.Store(0)
	byGen := map[int32]*sarama.OffsetCommitRequest{}
	moved := map[*partition]int64{}
	for _, p := range ps {
		p.mu.Lock()
		pos, dirty := p.mark, !p.revoked && p.mark > p.committed
		p.mu.Unlock()
		if !dirty {
			continue
		}
		req := byGen[p.gen]
		if req == nil {
			req = sarama.NewOffsetCommitRequest(s.commitClient.Config(), s.group)
			req.ConsumerGroupGeneration, req.ConsumerID = p.gen, p.member
			byGen[p.gen] = req
		}
		req.AddBlock(p.topic, p.id, pos, 0, "")
		moved[p] = pos
	}
	var errs []error
	for _, req := range byGen {
		resp, err := s.commitRequest(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for p, pos := range moved {
			if p.gen != req.ConsumerGroupGeneration {
				continue
			}
			if kerr := resp.Errors[p.topic][p.id]; kerr != sarama.ErrNoError {
				errs = append(errs, fmt.Errorf("kafka: commit %s %s/%d: %w", s.group, p.topic, p.id, kerr))
				if kerr == sarama.ErrNotCoordinatorForConsumer || kerr == sarama.ErrConsumerCoordinatorNotAvailable {
					_ = s.commitClient.RefreshCoordinator(s.group)
				}
				continue
			}
			p.mu.Lock()
			p.committed = max(p.committed, pos)
			p.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

func (s *sub) commitRequest(req *sarama.OffsetCommitRequest) (*sarama.OffsetCommitResponse, error) {
	broker, err := s.commitClient.Coordinator(s.group)
	if err == nil {
		var resp *sarama.OffsetCommitResponse
		if resp, err = broker.CommitOffset(req); err == nil {
			return resp, nil
		}
		_ = s.commitClient.RefreshCoordinator(s.group)
	}
	return nil, fmt.Errorf("kafka: commit %s: %w", s.group, err)
}

// release commits what ps recorded (best effort: a failure only means a
// redelivery), then fences them: nothing of them is committed or handed
// out afterwards.
func (s *sub) release(ps ...*partition) {
	s.fence.Lock()
	_ = s.commitLocked(ps)
	dropped := 0
	for _, p := range ps {
		p.mu.Lock()
		p.revoked = true
		for _, q := range p.keys {
			dropped += len(q)
		}
		p.keys, p.log = nil, nil
		p.mu.Unlock()
	}
	s.fence.Unlock()
	s.mu.Lock()
	for _, p := range ps {
		if s.parts[p.id] == p {
			delete(s.parts, p.id)
		}
	}
	s.ready = slicesDeleteRevoked(s.ready)
	s.held -= dropped
	s.rebuildLocked()
	s.mu.Unlock()
	s.signal(s.wake)
}

// slicesDeleteRevoked drops the records of revoked partitions.
func slicesDeleteRevoked(rs []driver.Record) []driver.Record {
	n := 0
	for _, r := range rs {
		p := r.Handle.(*handle).p
		p.mu.Lock()
		revoked := p.revoked
		p.mu.Unlock()
		if !revoked {
			rs[n] = r
			n++
		}
	}
	clear(rs[n:])
	return rs[:n]
}

// groupHandler is the sarama.ConsumerGroupHandler of a subscription.
type groupHandler struct{ s *sub }

// Setup creates the partitions of the claims and commits the start offset
// of every partition the group has no commit for yet (so that messages
// sent while every member is down are kept for the group).
func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	s := h.s
	ids := sess.Claims()[s.phys]
	parts := make(map[int32]*partition, len(ids))
	if len(ids) > 0 {
		committed, err := s.committedOffsets(ids)
		if err != nil {
			return err
		}
		ps := make([]*partition, 0, len(ids))
		for _, id := range ids {
			c := committed[id]
			start := c
			if c < 0 {
				at := sarama.OffsetNewest
				if s.c.opts.StartFrom == StartOldest || s.spec.Start == ports.StartEarliest {
					at = sarama.OffsetOldest
				}
				if start, err = s.commitClient.GetOffset(s.phys, id, at); err != nil {
					return err
				}
				sess.MarkOffset(s.phys, id, start, "") // the claim starts here
			}
			p := &partition{topic: s.phys, id: id, gen: sess.GenerationID(), member: sess.MemberID(),
				idText: strconv.Itoa(int(id)), genText: strconv.Itoa(int(sess.GenerationID())),
				mark: start, committed: c, keys: map[string][]driver.Record{}}
			parts[id] = p
			ps = append(ps, p)
		}
		s.fence.Lock()
		err = s.commitLocked(ps)
		s.fence.Unlock()
		if err != nil {
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

// ConsumeClaim hands the claim's channel to ReceiveBatch and waits for the
// session to end; then it commits what the partition recorded and fences
// it.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	s := h.s
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
	s.signal(s.wake)
	<-sess.Context().Done()
	s.release(p)
	return nil
}

// Cleanup releases the partitions left (claims that never started).
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error {
	s := h.s
	s.mu.Lock()
	ps := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	s.release(ps...)
	return nil
}

// committedOffsets fetches the group's committed offsets (-1: none).
func (s *sub) committedOffsets(ids []int32) (map[int32]int64, error) {
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
		out[id] = -1
		if b := resp.GetBlock(s.phys, id); b != nil {
			if b.Err != sarama.ErrNoError {
				return nil, b.Err
			}
			out[id] = b.Offset
		}
	}
	return out, nil
}

// Close commits what was acknowledged, fences every partition (nothing
// unacknowledged is committed: the group redelivers it), leaves the group
// and closes the clients; a Broadcast group without InstanceTTL is
// deleted. It waits until done or ctx is done (the close goes on in the
// background then).
func (s *sub) Close(ctx context.Context) error {
	s.stopOnce.Do(func() { go s.closeRun() })
	select {
	case <-s.stopDone:
		return s.stopErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *sub) closeRun() {
	defer close(s.stopDone)
	s.mu.Lock()
	ps := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	s.release(ps...)
	s.cancel()
	errs := []error{s.cg.Close()}
	close(s.stop)
	s.loops.Wait()
	if s.spec.Mode == ports.Broadcast && s.spec.InstanceTTL == 0 {
		if err := s.c.admin.DeleteConsumerGroup(s.group); err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
			errs = append(errs, fmt.Errorf("kafka: delete broadcast group %s: %w", s.group, err))
		}
	}
	errs = append(errs, s.client.Close(), s.commitClient.Close())
	if err := errors.Join(errs...); err != nil {
		s.stopErr = fmt.Errorf("kafka: stop %s: %w", s.group, err)
	}
}
