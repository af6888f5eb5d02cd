package kafka

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// sub is one consumer-group member on one topic: a franz-go client per
// group session. Its poll loop hands each poll's records to decode
// workers, a partition's always to the same one, which hand them to
// ReceiveBatch through a kit.Feed; the acknowledgements and the gap-free
// commits are kit.Partitions'.
type sub struct {
	c           *conn
	spec        ports.SubscriptionSpec
	phys, group string
	limit       int           // records pulled and not handed out
	retention   time.Duration // older records are skipped (0: none)
	startAt     int64         // sarama.OffsetNewest or OffsetOldest: where a partition without a commit starts
	log         *kit.Partitions[*claim]
	acks        interface { // log, or tx
		Ack(handles []any) error
		Flush(ctx context.Context) error
	}

	opts         []kgo.Opt          // of each session's client
	commitClient sarama.Client      // start offsets and commits, with the session's generation: not behind a Fetch long poll
	cancel       context.CancelFunc // ends the consume loop
	loop         sync.WaitGroup
	established  chan struct{} // closed by the first assignment
	establish    sync.Once
	failed       chan error    // a failed session: Subscribe's before the first, then ReceiveBatch's
	wake         chan struct{} // a held record became ready, or a partition was released

	feed      *kit.Feed[fetched]
	predecode atomic.Pointer[func(payload []byte) any] // driver.Predecoder
	lazy      atomic.Bool                              // driver.HeaderDeferrer
	add       func(*fetched)                           // s.log.AddTo, onto out
	out       []driver.Record                          // reused by ReceiveBatch
	outMax    int                                      // ReceiveBatch's max, for add

	// The session's: its partitions by id, set by its rebalance callbacks
	// and read by the poll loop between a poll and AllowRebalance only
	// (BlockRebalanceOnPoll); end ends the session.
	parts    map[int32]*partition
	end      context.CancelCauseFunc
	decoders *kit.Lanes // the decode workers, a partition's records on one; revoked waits for them

	tx      *kit.Transactions[*claim, *kgo.Record] // a transactional subscription's (transact.go)
	txp     *txnProducer
	records kafkawire.Records // staged, reused once their transaction committed
}

type partition = kit.Partition[*claim]

// decodeAhead is the fewest records the decode workers keep ready for
// ReceiveBatch: franz-go fetches a broker's next batch once the last one
// was polled whole, so a short feed stalls the fetches (about a sixth
// less throughput at 400 records than at 3200 in `go run ./tck/bench
// -adapter kafka`; 12,800 gained nothing more).
const decodeAhead = 4096

// claim is one partition claimed in one generation.
type claim struct {
	topic   string // physical
	id, gen int32
	member  string
	facts   kafkawire.MemberFacts // generation and member, for the records' facts
	dec     kafkawire.Decoder
	latest  time.Time // the latest record timestamp so far (kit.Feed's order)
}

func (c *claim) String() string { return fmt.Sprintf("%s/%d (generation %d)", c.topic, c.id, c.gen) }

// Subscribe returns once the group session is established and its start
// offsets committed: a message sent after it returns is delivered.
func (c *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	return c.subscribe(ctx, spec, nil)
}

// subscribe returns a nil interface on failure, not a nil *sub.
func (c *conn) subscribe(ctx context.Context, spec ports.SubscriptionSpec, txp *txnProducer) (driver.TransactionalSubscription, error) {
	s := &sub{txp: txp, c: c, spec: spec, phys: c.topic(spec.Topic), group: c.group(spec),
		limit: spec.InFlight * c.opts.Buffer, established: make(chan struct{}), failed: make(chan error, 1),
		wake: make(chan struct{}, 1)}
	s.feed = kit.NewFeed[fetched](max(s.limit, decodeAhead))
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
	s.startAt = conf.Consumer.Offsets.Initial // Options.StartFrom, or the spec's Start
	var err error
	if s.commitClient, err = sarama.NewClient(c.opts.Brokers, conf); err != nil {
		return nil, fmt.Errorf("kafka: consumer group %s: %w", s.group, err)
	}
	s.opts = s.consumerOpts(spec.SingleActive)
	po := kit.PartitionsOptions[*claim]{Commit: s.commit, Interval: c.opts.CommitInterval,
		Threshold: c.opts.CommitThreshold, Retry: c.opts.CommitRetry, Wake: s.wake}
	if txp == nil {
		s.log = kit.NewPartitions(po)
		s.acks = s.log
	} else { // a round is one transaction
		s.tx = kit.NewTransactions(po, s.commitTxn, s.sessionFailed)
		s.log, s.acks = s.tx.Partitions, s.tx
	}
	s.add = func(f *fetched) { s.out = s.log.AddTo(s.out, s.outMax, f.p, f.off, &f.r, f.skip) }
	loop, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.loop.Go(func() { s.consumeLoop(loop) })
	select {
	case <-s.established:
		return s, nil
	case err = <-s.failed:
		err = fmt.Errorf("kafka: join group %s: %w", s.group, err)
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = s.Close(context.Background())
	return nil, err
}

// consumerOpts are a session's client options: the producers' connection
// (Options.franz), the group with no commits of franz-go's own (the
// subscription commits, kit.Partitions), rebalances held while a poll's
// records are handed over, read_committed (the output of an aborted
// transaction is never read), a committed position the log no longer
// holds resumed at its oldest record, the range balancer (a sarama member's
// default: groups shared with sarama consumers keep working) or the
// single-active one.
func (s *sub) consumerOpts(single bool) []kgo.Opt {
	o := s.c.opts
	var balancer kgo.GroupBalancer = kgo.RangeBalancer()
	if single {
		balancer = kafkawire.SingleActive{SingleActive: kit.NewSingleActive()}
	}
	return append(o.franz(), kgo.ConsumerGroup(s.group), kgo.ConsumeTopics(s.phys), kgo.Balancers(balancer),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(o.SessionTimeout), kgo.HeartbeatInterval(o.HeartbeatInterval), kgo.RebalanceTimeout(o.RebalanceTimeout),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a committed position retention deleted: the oldest record left, none skipped
		kgo.OnPartitionsAssigned(s.assigned), kgo.OnPartitionsRevoked(s.revoked), kgo.OnPartitionsLost(s.revoked))
}

// consumeLoop runs one session after the other; one that failed to start
// is retried after a backoff.
func (s *sub) consumeLoop(ctx context.Context) {
	rejoin := kit.DefaultBackoff
	rejoin.Initial = s.c.opts.CommitRetry
	for ctx.Err() == nil {
		_ = kit.Reconnect(ctx, rejoin, s.session, s.sessionFailed)
	}
}

// session is one group membership: a client joins, its poll loop runs
// until ctx is done, a failed transaction or a failed start of the
// session ends it, then it leaves the group (its partitions revoked and
// released) and the next session joins anew.
func (s *sub) session(parent context.Context) error {
	ctx, end := context.WithCancelCause(parent)
	defer end(nil)
	s.end = end // read by assigned, on the client's goroutine, after NewClient
	s.decoders = kit.NewLanes(min(runtime.GOMAXPROCS(0), int(s.c.opts.Partitions)))
	cl, err := kgo.NewClient(s.opts...)
	if err != nil {
		return err
	}
	if ending := s.tx.Ending(); ending != nil {
		go func() {
			select {
			case <-ending:
				end(nil) // kit.Transactions reported it
			case <-ctx.Done():
			}
		}()
	}
	s.poll(ctx, cl)
	cl.Close()
	s.decoders.Close()
	s.log.ReleaseAll()
	if err := context.Cause(ctx); parent.Err() == nil && !errors.Is(err, context.Canceled) {
		return err // rejoin after a backoff
	}
	return nil
}

// poll hands the records of each poll to the decode workers, a
// partition's always to the same one (its order kept), never more than
// the feed has room for: nothing waits between a poll and AllowRebalance,
// so a rebalance waits on no pipeline, and the workers' Send never waits.
func (s *sub) poll(ctx context.Context, cl *kgo.Client) {
	for {
		room := s.feed.Room(ctx)
		if room == 0 {
			return
		}
		fs := cl.PollRecords(ctx, room)
		now := time.Now()
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, kgo.ErrClientClosed) {
				s.sessionFailed(err)
			}
		})
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if p, recs := s.parts[fp.Partition], fp.Records; p != nil && len(recs) > 0 {
				s.feed.Reserve(len(recs))
				s.decoders.Do(int(fp.Partition), func() {
					s.feed.Send(len(recs), func(i int) (fetched, time.Time) { return s.accept(p, recs[i], now) })
				})
			}
		})
		cl.AllowRebalance()
		if ctx.Err() != nil {
			return
		}
	}
}

// sessionFailed hands a failed session (or transaction) to Subscribe
// before the first session, to ReceiveBatch afterwards.
func (s *sub) sessionFailed(err error) {
	select {
	case s.failed <- &sessionError{fmt.Errorf("kafka: group %s session: %w", s.group, err)}:
	default:
	}
}

// sessionError is a failed group session (the consume loop rejoins).
type sessionError struct{ error }

func (e *sessionError) Unwrap() error { return e.error }

// ReceiveBatch adds what the poll loop decoded and returns up to max
// ready records; with none it waits for the poll loop, wake, a failure
// and ctx.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	for {
		room := s.limit - s.log.Pending()
		s.out, s.outMax = s.log.Take(s.out[:0], max), max // what waits goes first
		s.feed.Take(room, s.add)
		if len(s.out) > 0 {
			return s.out, nil
		}
		if err := s.feed.Wait(ctx, room > 0, s.wake, s.failed); err != nil {
			return nil, err
		}
	}
}

// fetched is a record decoded by a decode worker.
type fetched struct {
	p    *partition
	off  int64
	skip bool
	r    driver.Record
}

// accept decodes a record of p and returns it with p's latest timestamp so
// far. One outside the key filter, older than the retention (Kafka
// deletes segments late) or a requeue copy of another group is skipped
// (done at once).
func (s *sub) accept(p *partition, kr *kgo.Record, now time.Time) (fetched, time.Time) {
	c := p.ID
	r := decode(kr, s.spec.Topic, c, now, s.lazy.Load())
	skip := !s.spec.MatchKey(r.Message.Key) || (s.retention > 0 && !kr.Timestamp.IsZero() && now.Sub(kr.Timestamp) > s.retention)
	if pd := s.predecode.Load(); pd != nil && !skip && r.Err == nil {
		r.Decoded = (*pd)(r.Message.Payload)
	}
	if kr.Timestamp.After(c.latest) {
		c.latest = kr.Timestamp
	}
	return fetched{p, kr.Offset, skip, r}, c.latest
}

// DeferHeaders leaves the headers of the records decoded from now on in
// franz-go's records (kafkawire.DecodeLazy).
func (s *sub) DeferHeaders() { s.lazy.Store(true) }

// Predecode decodes payloads on the poll loop from now on.
func (s *sub) Predecode(decode func(payload []byte) any) { s.predecode.Store(&decode) }

// SendAcks records offsets, without I/O; none when a partition of theirs
// was revoked (driver.ErrRecordsLost: its new owner redelivers them).
func (s *sub) SendAcks(ctx context.Context, handles []any) error { return s.acks.Ack(handles) }

// FlushAcks commits what was recorded, retrying every CommitRetry. A
// transactional subscription's also returns a transaction that failed
// since the last call (its records come again).
func (s *sub) FlushAcks(ctx context.Context) error { return s.acks.Flush(ctx) }

// commit sends moved in one OffsetCommit, with the generation and member
// id that claimed them: a session's partitions are released before the
// next session claims any, so a round never spans two generations. A
// round the coordinator refused in part is sent whole again.
func (s *sub) commit(moved []kit.Position[*claim]) error {
	offs := make(map[int32]int64, len(moved))
	for _, m := range moved {
		offs[m.ID.id] = m.Offset
	}
	if err := commitOffsets(s.commitClient, s.group, s.phys, moved[0].ID.gen, moved[0].ID.member, offs); err != nil {
		return fmt.Errorf("kafka: commit %s: %w", s.group, err)
	}
	return nil
}

// assigned claims the partitions of a new generation, committing the start
// offset of each without a commit first, so that what is sent while every
// member is down is kept. franz-go calls it before it fetches their
// offsets, and on every join, with no partition too. A failed commit ends
// the session with it (reported; the next one joins after a backoff).
func (s *sub) assigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	member, gen := cl.GroupMetadata()
	ids := assigned[s.phys]
	s.parts = make(map[int32]*partition, len(ids))
	if len(ids) > 0 {
		starts, err := pinStarts(s.commitClient, s.group, s.phys, ids, s.startAt, gen, member)
		if err != nil {
			s.end(fmt.Errorf("committing start offsets failed: %w", err))
			return
		}
		for _, id := range ids {
			c := &claim{topic: s.phys, id: id, gen: gen, member: member,
				facts: kafkawire.MemberFacts{Generation: strconv.Itoa(int(gen)), Member: member}}
			s.parts[id] = s.log.Claim(c, starts[id], starts[id])
		}
	}
	s.tx.Renew()
	s.establish.Do(func() { close(s.established) })
}

// revoked releases the partitions a rebalance took (or the session lost):
// nothing of them is committed or handed out afterwards.
func (s *sub) revoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.decoders.Wait()
	for _, id := range revoked[s.phys] {
		if p := s.parts[id]; p != nil {
			s.log.Release(p)
			delete(s.parts, id)
		}
	}
}

// Close commits what was acknowledged, leaves the group, deletes a
// Broadcast group without InstanceTTL and closes the clients.
func (s *sub) Close(ctx context.Context) error {
	_, err := kit.Await(ctx, func() (struct{}, error) {
		s.log.ReleaseAll()
		s.cancel()
		s.loop.Wait()
		s.log.Close()
		var errs []error
		if s.spec.Mode == ports.Broadcast && s.spec.InstanceTTL == 0 {
			if err := s.c.admin.DeleteConsumerGroup(s.group); err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
				errs = append(errs, fmt.Errorf("delete broadcast group: %w", err))
			}
		}
		if s.txp != nil {
			s.txp.Close()
		}
		if err := errors.Join(append(errs, s.commitClient.Close())...); err != nil {
			return struct{}{}, fmt.Errorf("kafka: stop %s: %w", s.group, err)
		}
		return struct{}{}, nil
	}, nil)
	return err
}
