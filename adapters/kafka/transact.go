package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/adapters/kit/kafkawire"
	"github.com/sluicemq/sluice/ports"
)

// txnProducer is a transactional subscription's producer, a franz-go
// client: its commit rounds are transactions of it (kit.Transactions keeps
// what is staged and fails the session when one aborts). Its transactional
// id is the group's plus a random suffix: a zombie (a member of an older
// generation) is fenced by the group generation its offsets carry
// (TxnOffsetCommit v3, KIP-447), not by the id; an open transaction of a
// crashed member is aborted by the broker after Options.TransactionTimeout.
type txnProducer struct {
	*kgo.Client
	id   string
	opts []kgo.Opt // to replace a client in a fatal state
}

// SubscribeTransactional subscribes with a transactional producer. The
// portable layer calls it only with the idempotent producer (Capabilities'
// TransactionalSend).
func (c *conn) SubscribeTransactional(ctx context.Context, spec ports.SubscriptionSpec) (driver.TransactionalSubscription, error) {
	t := &txnProducer{id: c.group(spec) + "-txn-" + ports.NewID()}
	t.opts = append(c.opts.franz(), kgo.TransactionalID(t.id), kgo.TransactionTimeout(c.opts.TransactionTimeout))
	var err error
	if t.Client, err = kgo.NewClient(t.opts...); err != nil {
		return nil, fmt.Errorf("kafka: transactional producer: %w", err)
	}
	s, err := c.subscribe(ctx, spec, t)
	if err != nil {
		t.Close()
	}
	return s, err
}

// Stage converts msgs and holds them with the record of handle.
func (s *sub) Stage(ctx context.Context, handle any, _ ports.Facts, msgs []ports.Message) error {
	var few [4]*kgo.Record // tx.Stage copies them: no allocation for a few
	rs := few[:0]
	for i := range msgs {
		r, err := s.c.record(ctx, &msgs[i], &s.records)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	if err := s.tx.Stage(handle, rs); err != nil {
		return fmt.Errorf("kafka: stage for %s: %w", s.phys, err)
	}
	return nil
}

// Discard drops what was staged for handles.
func (s *sub) Discard(handles []any) { s.tx.Discard(handles) }

// commitTxn publishes rs and commits moved in one transaction, with the
// generation and member id that claimed them (nothing to publish: a plain
// commit, fenced alike); on failure it aborts. A client that cannot begin
// (fenced, or its abort failed) is replaced. TransactionTimeout bounds it.
func (s *sub) commitTxn(moved []kit.Position[*claim], rs []*kgo.Record) error {
	if len(rs) == 0 {
		return s.commit(moved)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.c.opts.TransactionTimeout)
	defer cancel()
	t := s.txp
	err := t.BeginTransaction()
	if err != nil {
		t.Close()
		t.Client, _ = kgo.NewClient(t.opts...) // these options made a client before
		err = t.BeginTransaction()
	}
	if err == nil {
		err = t.ProduceSync(ctx, rs...).FirstErr()
	}
	if err == nil {
		err = s.txnOffsets(ctx, moved)
	}
	if err == nil {
		err = t.EndTransaction(ctx, kgo.TryCommit)
	}
	if err != nil {
		err = errors.Join(err, t.AbortBufferedRecords(ctx), t.EndTransaction(ctx, kgo.TryAbort))
		return fmt.Errorf("kafka: transaction of %s: %w", s.group, err)
	}
	s.records.Reuse(rs) // each one's promise was called (ProduceSync), and kit.Transactions drops them
	return nil
}

// txnOffsets adds moved to the open transaction (kafkawire.TxnOffsets),
// with the generation and member id that claimed them.
func (s *sub) txnOffsets(ctx context.Context, moved []kit.Position[*claim]) error {
	return kafkawire.TxnOffsets(ctx, s.txp.Client, s.txp.id, s.group, moved[0].ID.gen, moved[0].ID.member, s.phys,
		func(yield func(int32, int64) bool) {
			for _, m := range moved {
				if !yield(m.ID.id, m.Offset) {
					return
				}
			}
		})
}
