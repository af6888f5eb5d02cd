package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// txn is a transactional subscription's producer and staged messages.
// Its transactional id is the group's plus a random suffix: a zombie (a
// member of an older generation) is fenced by the group generation its
// offsets carry (TxnOffsetCommit v3, KIP-447), not by the id; an open
// transaction of a crashed member is aborted by the broker after
// Options.TransactionTimeout.
type txn struct {
	conf   *sarama.Config
	prod   sarama.SyncProducer
	mu     sync.Mutex
	claims map[int32]*claim // the session's, by partition
	staged map[any]staged   // by record handle
	end    chan struct{}    // closed after a failed transaction: the session ends
	failed bool             // this session's transaction failed
	lost   error            // a failed transaction, until FlushAcks returns it
}

type staged struct {
	c    *claim
	off  int64
	msgs []*sarama.ProducerMessage
}

var _ driver.Transactor = (*conn)(nil)

// SubscribeTransactional subscribes with a transactional producer whose
// transactions carry the staged messages and the offsets (see txn).
func (c *conn) SubscribeTransactional(ctx context.Context, spec ports.SubscriptionSpec) (driver.TransactionalSubscription, error) {
	if c.opts.DisableIdempotence {
		return nil, fmt.Errorf("kafka: transactions need the idempotent producer (Options.DisableIdempotence is set): %w", ports.ErrExactlyOnce)
	}
	conf := c.opts.config("producer", 0)
	conf.Producer.Transaction.ID = c.group(spec) + "-txn-" + ports.NewID()
	conf.Producer.Transaction.Timeout = c.opts.TransactionTimeout
	conf.Producer.Transaction.Retry.Backoff = 10 * time.Millisecond // sarama's 100ms stalls every busy coordinator answer
	prod, err := sarama.NewSyncProducer(c.opts.Brokers, conf)
	if err != nil {
		return nil, fmt.Errorf("kafka: transactional producer: %w", err)
	}
	s, err := c.subscribe(ctx, spec, &txn{conf: conf, prod: prod, claims: map[int32]*claim{}, staged: map[any]staged{}, end: make(chan struct{})})
	if err != nil {
		_ = prod.Close()
		return nil, err
	}
	return s, nil
}

// Stage converts msgs and holds them with the record of handle, found by
// its partition, generation and offset facts.
func (s *sub) Stage(ctx context.Context, handle any, facts map[string]string, msgs []ports.Message) error {
	pms := make([]*sarama.ProducerMessage, len(msgs))
	for i := range msgs {
		phys := s.c.topic(msgs[i].Topic)
		pms[i] = producerMessage(phys, &msgs[i])
		err := msgs[i].CheckSize(s.c.opts.MaxMessageBytes, pms[i].ByteSize(2)-len(msgs[i].Payload))
		if err == nil {
			err = s.c.ensureTopic(ctx, phys)
		}
		if err != nil {
			return err
		}
	}
	part, _ := strconv.Atoi(facts["partition"])
	off, err := strconv.ParseInt(facts["offset"], 10, 64)
	t := s.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.claims[int32(part)]
	if err != nil || c == nil || c.genText != facts["generation"] || t.failed {
		return fmt.Errorf("kafka: stage for %s/%s: partition no longer claimed: %w", s.phys, facts["partition"], driver.ErrRecordsLost)
	}
	st := t.staged[handle]
	t.staged[handle] = staged{c: c, off: off, msgs: append(st.msgs, pms...)}
	return nil
}

// Discard drops what was staged for handles.
func (s *sub) Discard(handles []any) {
	if s.tx == nil {
		return
	}
	s.tx.mu.Lock()
	for _, h := range handles {
		delete(s.tx.staged, h)
	}
	s.tx.mu.Unlock()
}

// sendAcksTxn records the offsets, as SendAcks does: the commit loop (or
// FlushAcks) commits them with their staged messages in one transaction.
// Records of a session whose transaction failed are refused: they come
// again.
func (s *sub) sendAcksTxn(handles []any) error {
	s.tx.mu.Lock()
	failed := s.tx.failed
	s.tx.mu.Unlock()
	if failed {
		return fmt.Errorf("kafka: transaction of %s failed: %w", s.group, driver.ErrRecordsLost)
	}
	return s.log.Ack(handles)
}

// commitTxn commits moved, and the messages staged for the records below
// each position, in one transaction. On failure it aborts, fails the
// session's further rounds and ends the session: the next one resumes at
// the committed offsets.
func (s *sub) commitTxn(moved []kit.Position[*claim]) error {
	t := s.tx
	t.mu.Lock()
	if t.failed {
		t.mu.Unlock()
		return fmt.Errorf("kafka: %s: session ending after a failed transaction", s.group)
	}
	var in []staged
	var done []any
	for h, st := range t.staged {
		if slices.ContainsFunc(moved, func(p kit.Position[*claim]) bool { return p.ID == st.c && st.off < p.Offset }) {
			in, done = append(in, st), append(done, h)
		}
	}
	t.mu.Unlock()
	slices.SortFunc(in, func(a, b staged) int { return int(a.off - b.off) }) // per partition, in offset order
	var msgs []*sarama.ProducerMessage
	for _, st := range in {
		msgs = append(msgs, st.msgs...)
	}
	offsets := map[string][]*sarama.PartitionOffsetMetadata{}
	for _, m := range moved {
		offsets[m.ID.topic] = append(offsets[m.ID.topic], &sarama.PartitionOffsetMetadata{Partition: m.ID.id, Offset: m.Offset, LeaderEpoch: -1})
	}
	group := &sarama.ConsumerGroupMetadata{GroupID: s.group, GenerationID: moved[0].ID.gen, MemberID: moved[0].ID.member}
	err := t.prod.BeginTxn()
	if err == nil && len(msgs) > 0 {
		err = t.prod.SendMessages(msgs)
	}
	if err == nil {
		err = t.prod.AddOffsetsToTxnWithGroupMetadata(offsets, group)
	}
	if err == nil {
		err = t.prod.CommitTxn()
	}
	if err != nil {
		return s.txnFailed(err)
	}
	t.mu.Lock()
	for _, h := range done {
		delete(t.staged, h)
	}
	t.mu.Unlock()
	for i := range moved {
		moved[i].Stored = true
	}
	return nil
}

// txnFailed aborts the transaction, replaces a producer in a fatal state
// and ends the session.
func (s *sub) txnFailed(cause error) error {
	t := s.tx
	if t.prod.TxnStatus()&sarama.ProducerTxnFlagInTransaction != 0 {
		_ = t.prod.AbortTxn()
	}
	if t.prod.TxnStatus()&sarama.ProducerTxnFlagFatalError != 0 {
		_ = t.prod.Close()
		if p, err := sarama.NewSyncProducer(s.c.opts.Brokers, t.conf); err == nil {
			t.prod = p
		} else {
			cause = errors.Join(cause, err)
		}
	}
	err := fmt.Errorf("kafka: transaction of %s aborted, its records come again: %w", s.group, errors.Join(driver.ErrRecordsLost, cause))
	t.mu.Lock()
	t.lost = err
	if !t.failed {
		t.failed = true
		close(t.end)
	}
	t.mu.Unlock()
	select { // reported by ReceiveBatch, as a failed session is
	case s.failed <- &sessionError{err}:
	default:
	}
	return err
}

// claimed records a session's claims and opens its transactions.
func (t *txn) claimed(parts map[int32]*partition) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.claims)
	for id, p := range parts {
		t.claims[id] = p.ID
	}
	if t.failed {
		t.failed, t.end = false, make(chan struct{})
	}
}

// ending returns the channel closed when the session must end.
func (t *txn) ending() <-chan struct{} {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.end
}

// released drops what was staged for records of c.
func (t *txn) released(c *claim) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if t.claims[c.id] == c {
		delete(t.claims, c.id) // Stage refuses its records from now on
	}
	for h, st := range t.staged {
		if st.c == c {
			delete(t.staged, h)
		}
	}
	t.mu.Unlock()
}
