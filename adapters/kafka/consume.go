package kafka

import (
	"context"
	"errors"
	"fmt"
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

// sub is one consumer-group member on one topic. Each claim decodes its
// records on its own goroutine and hands them to ReceiveBatch through a
// kit.Feed; the acknowledgements and the gap-free commits are
// kit.Partitions'.
type sub struct {
	c           *conn
	spec        ports.SubscriptionSpec
	phys, group string
	limit       int           // records pulled and not handed out
	retention   time.Duration // older records are skipped (0: none)
	log         *kit.Partitions[*claim]
	acks        interface { // log, or tx
		Ack(handles []any) error
		Flush(ctx context.Context) error
	}

	client, commitClient sarama.Client // commits get their own connection: not behind a Fetch long poll
	cg                   sarama.ConsumerGroup
	cancel               context.CancelFunc // ends the consume loop
	loop                 sync.WaitGroup
	established          chan struct{} // closed by the first Setup
	establish            sync.Once
	failed               chan error    // a failed session: Subscribe's before the first, then ReceiveBatch's
	wake                 chan struct{} // a held record became ready, or a partition was released

	feed      *kit.Feed[fetched]
	predecode atomic.Pointer[func(payload []byte) any] // driver.Predecoder
	add       func(fetched)                            // s.log.Add
	out       []driver.Record                          // reused by ReceiveBatch
	parts     map[int32]*partition                     // the session's, by Setup for its ConsumeClaims (sarama starts them after it)

	tx  *kit.Transactions[*claim, *kgo.Record] // a transactional subscription's (transact.go)
	txp *txnProducer
}

type partition = kit.Partition[*claim]

// claim is one partition claimed in one generation.
type claim struct {
	topic   string // physical
	id, gen int32
	member  string
	genText string
	dec     kafkawire.Decoder
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
		wake: make(chan struct{}, 1), feed: kit.NewFeed[fetched](16)}
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
		conf.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{singleActive{kit.NewSingleActive()}}
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
	po := kit.PartitionsOptions[*claim]{Commit: s.commit, Interval: c.opts.CommitInterval,
		Threshold: c.opts.CommitThreshold, Retry: c.opts.CommitRetry, Wake: s.wake}
	if txp == nil {
		s.log = kit.NewPartitions(po)
		s.acks = s.log
	} else { // a round is one transaction
		s.tx = kit.NewTransactions(po, s.commitTxn, s.sessionFailed)
		s.log, s.acks = s.tx.Partitions, s.tx
	}
	s.add = func(f fetched) { s.log.Add(f.p, f.off, f.r, f.skip) }
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

// consumeLoop runs one session after the other; a failed one is
// rejoined after a backoff.
func (s *sub) consumeLoop(ctx context.Context) {
	rejoin := kit.DefaultBackoff
	rejoin.Initial = s.c.opts.CommitRetry
	var err error
	for ctx.Err() == nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
		err = kit.Reconnect(ctx, rejoin, func(ctx context.Context) error {
			err := s.cg.Consume(ctx, []string{s.phys}, s)
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return kit.Permanent(err)
			}
			return err
		}, s.sessionFailed)
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

// ReceiveBatch adds what the claims decoded and returns up to max ready
// records; with none it waits for the claims, wake, a failure and ctx.
func (s *sub) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	for {
		room := s.limit - s.log.Pending()
		s.feed.Take(room, s.add)
		if out := s.log.Take(s.out[:0], max); len(out) > 0 {
			s.out = out
			return out, nil
		}
		if err := s.feed.Wait(ctx, room > 0, s.wake, s.failed); err != nil {
			return nil, err
		}
	}
}

// fetched is a record decoded on its claim's goroutine.
type fetched struct {
	p    *partition
	off  int64
	skip bool
	r    driver.Record
}

// accept decodes a record. One outside the key filter, older than the
// retention (Kafka deletes segments late) or a requeue copy of another
// group is skipped (done at once).
func (s *sub) accept(p *partition, cm *sarama.ConsumerMessage, now time.Time) (fetched, time.Time) {
	r := decode(cm, s.spec.Topic, p.ID, now)
	skip := !s.spec.MatchKey(r.Message.Key) || (s.retention > 0 && !cm.Timestamp.IsZero() && now.Sub(cm.Timestamp) > s.retention) ||
		kit.ForeignCopy(r.Message.Headers, s.group)
	if pd := s.predecode.Load(); pd != nil && !skip && r.Err == nil {
		r.Decoded = (*pd)(r.Message.Payload)
	}
	return fetched{p, cm.Offset, skip, r}, cm.Timestamp
}

// Predecode decodes payloads on the claims' goroutines from now on.
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

// Setup commits the start offset of every claimed partition without a
// commit, so that what is sent while every member is down is kept.
func (s *sub) Setup(sess sarama.ConsumerGroupSession) error {
	ids := sess.Claims()[s.phys]
	at := s.client.Config().Consumer.Offsets.Initial // Options.StartFrom, or the spec's Start (Subscribe)
	s.parts = make(map[int32]*partition, len(ids))
	if len(ids) > 0 {
		starts, err := pinStarts(s.commitClient, s.group, s.phys, ids, at, sess.GenerationID(), sess.MemberID())
		if err != nil {
			return fmt.Errorf("kafka: group %s: committing start offsets failed: %w", s.group, err)
		}
		for _, id := range ids {
			sess.MarkOffset(s.phys, id, starts[id], "") // the claim starts here
			c := &claim{topic: s.phys, id: id, gen: sess.GenerationID(), member: sess.MemberID(),
				genText: strconv.Itoa(int(sess.GenerationID()))}
			s.parts[id] = s.log.Claim(c, starts[id], starts[id])
		}
	}
	s.tx.Renew()
	s.establish.Do(func() { close(s.established) })
	return nil
}

// ConsumeClaim decodes the claim's records for ReceiveBatch until the
// session ends, then releases the partition: nothing of it is committed
// or handed out afterwards.
func (s *sub) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p := s.parts[claim.Partition()]
	if p == nil {
		return fmt.Errorf("kafka: claim %s/%d without a partition", claim.Topic(), claim.Partition())
	}
	kit.Pump(s.feed, claim.Messages(), sess.Context().Done(), s.tx.Ending(), // a failed transaction ends the session
		func(cm *sarama.ConsumerMessage, now time.Time) (fetched, time.Time) { return s.accept(p, cm, now) })
	s.log.Release(p)
	return nil
}

func (s *sub) Cleanup(sarama.ConsumerGroupSession) error {
	s.log.ReleaseAll()
	return nil
}

// Close commits what was acknowledged, leaves the group, deletes a
// Broadcast group without InstanceTTL and closes the clients.
func (s *sub) Close(ctx context.Context) error {
	_, err := kit.Await(ctx, func() (struct{}, error) {
		s.log.ReleaseAll()
		s.cancel()
		errs := []error{s.cg.Close()}
		s.loop.Wait()
		s.log.Close()
		if s.spec.Mode == ports.Broadcast && s.spec.InstanceTTL == 0 {
			if err := s.c.admin.DeleteConsumerGroup(s.group); err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
				errs = append(errs, fmt.Errorf("delete broadcast group: %w", err))
			}
		}
		if s.txp != nil {
			s.txp.Close()
		}
		if err := errors.Join(append(errs, s.client.Close(), s.commitClient.Close())...); err != nil {
			return struct{}{}, fmt.Errorf("kafka: stop %s: %w", s.group, err)
		}
		return struct{}{}, nil
	}, nil)
	return err
}

// SendRequeueCopies publishes the portable layer's counted requeue copies
// to the topic, which every group reads: each is addressed to this
// subscription's group (kit.AddressCopies).
func (s *sub) SendRequeueCopies(ctx context.Context, msgs []ports.Message) []error {
	kit.AddressCopies(msgs, s.group)
	return s.c.SendBatch(ctx, msgs)
}
