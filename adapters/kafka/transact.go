package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// txnProducer is a transactional subscription's producer: its commit
// rounds are transactions of it (kit.Transactions keeps what is staged
// and fails the session when one aborts). Its transactional id is the
// group's plus a random suffix: a zombie (a member of an older generation)
// is fenced by the group generation its offsets carry (TxnOffsetCommit v3,
// KIP-447), not by the id; an open transaction of a crashed member is
// aborted by the broker after Options.TransactionTimeout.
type txnProducer struct {
	sarama.SyncProducer
	conf *sarama.Config
}

// SubscribeTransactional subscribes with a transactional producer. The
// portable layer calls it only with the idempotent producer (Capabilities'
// TransactionalSend).
func (c *conn) SubscribeTransactional(ctx context.Context, spec ports.SubscriptionSpec) (driver.TransactionalSubscription, error) {
	t := &txnProducer{conf: c.opts.config("producer", 0)}
	t.conf.Producer.Transaction.ID = c.group(spec) + "-txn-" + ports.NewID()
	t.conf.Producer.Transaction.Timeout = c.opts.TransactionTimeout
	t.conf.Producer.Transaction.Retry.Backoff = 10 * time.Millisecond // sarama's 100ms stalls every busy coordinator answer
	var err error
	if t.SyncProducer, err = sarama.NewSyncProducer(c.opts.Brokers, t.conf); err != nil {
		return nil, fmt.Errorf("kafka: transactional producer: %w", err)
	}
	s, err := c.subscribe(ctx, spec, t)
	if err != nil {
		_ = t.Close()
	}
	return s, err
}

// Stage converts msgs and holds them with the record of handle.
func (s *sub) Stage(ctx context.Context, handle any, _ ports.Facts, msgs []ports.Message) error {
	pms := make([]*sarama.ProducerMessage, len(msgs))
	for i := range msgs {
		var err error
		if pms[i], err = s.c.producerMessage(ctx, &msgs[i]); err != nil {
			return err
		}
	}
	if err := s.tx.Stage(handle, pms); err != nil {
		return fmt.Errorf("kafka: stage for %s: %w", s.phys, err)
	}
	return nil
}

// Discard drops what was staged for handles.
func (s *sub) Discard(handles []any) { s.tx.Discard(handles) }

// commitTxn publishes msgs and commits moved in one transaction, with the
// generation and member id that claimed them. On failure it aborts and
// replaces a producer in a fatal state.
func (s *sub) commitTxn(moved []kit.Position[*claim], msgs []*sarama.ProducerMessage) error {
	t := s.txp
	offsets := map[string][]*sarama.PartitionOffsetMetadata{}
	for _, m := range moved {
		offsets[m.ID.topic] = append(offsets[m.ID.topic], &sarama.PartitionOffsetMetadata{Partition: m.ID.id, Offset: m.Offset, LeaderEpoch: -1})
	}
	group := &sarama.ConsumerGroupMetadata{GroupID: s.group, GenerationID: moved[0].ID.gen, MemberID: moved[0].ID.member}
	err := t.BeginTxn()
	if err == nil && len(msgs) > 0 {
		err = t.SendMessages(msgs)
	}
	if err == nil {
		err = t.AddOffsetsToTxnWithGroupMetadata(offsets, group)
	}
	if err == nil {
		err = t.CommitTxn()
	}
	if err == nil {
		return nil
	}
	if t.TxnStatus()&sarama.ProducerTxnFlagInTransaction != 0 {
		_ = t.AbortTxn()
	}
	if t.TxnStatus()&sarama.ProducerTxnFlagFatalError != 0 {
		_ = t.Close()
		if p, perr := sarama.NewSyncProducer(s.c.opts.Brokers, t.conf); perr == nil {
			t.SyncProducer = p
		} else {
			err = errors.Join(err, perr)
		}
	}
	return fmt.Errorf("kafka: transaction of %s: %w", s.group, err)
}
