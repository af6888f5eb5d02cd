package kit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sluicemq/sluice/adapters/driver"
)

// Transactions is a [Partitions] whose commit rounds are transactions: the
// messages staged against each record handed out (of type M, the
// client's) are published with the positions they lie below, in one
// transaction per round, so that the driver of a driver.Transactor maps
// only its broker's begin, produce, offsets, commit and abort (Commit).
// A round runs every Interval, at Threshold acknowledgements and at Flush,
// as Partitions' do.
//
// A failed transaction fails the session: its records come again from the
// committed positions, so Ack and Stage refuse further records (with
// driver.ErrRecordsLost), the channel of [Transactions.Ending] is closed
// for the driver to end the session, and the next Flush returns the
// failure. [Transactions.Renew] starts the next session.
type Transactions[P comparable, M any] struct {
	*Partitions[P]
	commit func(moved []Position[P], msgs []M) error
	report func(error)

	mu     sync.Mutex
	staged map[*partitionHandle[P]][]M
	slab   []M           // where Stage copies a record's messages to, a chunk at a time
	end    chan struct{} // closed after a failed transaction
	failed bool          // this session's transaction failed
	lost   error         // a failed transaction, until Flush returns it
}

// NewTransactions returns the state of one transactional consumer and
// starts its commit loop. o.Commit is not used: commit gets the moved
// positions and the messages staged for the records below them (by
// offset, oldest first), publishes them and stores the positions in one
// transaction, or aborts it and returns why. report, when not nil, is
// told of each failed transaction as it happens.
func NewTransactions[P comparable, M any](o PartitionsOptions[P], commit func(moved []Position[P], msgs []M) error, report func(error)) *Transactions[P, M] {
	t := &Transactions[P, M]{commit: commit, report: report, staged: map[*partitionHandle[P]][]M{}, end: make(chan struct{})}
	o.Commit = t.round
	t.Partitions = NewPartitions(o)
	return t
}

// Stage holds copies of msgs until the record of handle is committed (the
// transaction publishes them) or discarded; it does not keep msgs. It
// returns an error wrapping driver.ErrRecordsLost when the record can no
// longer be committed: its partition was released, or the session's
// transaction failed.
func (t *Transactions[P, M]) Stage(handle any, msgs []M) error {
	h := handle.(*partitionHandle[P])
	released := h.p.isReleased()
	t.mu.Lock()
	defer t.mu.Unlock()
	if released || t.failed {
		return fmt.Errorf("partition %v no longer claimed: %w", h.p.ID, driver.ErrRecordsLost)
	}
	if cur, ok := t.staged[h]; ok {
		t.staged[h] = append(cur, msgs...)
		return nil
	}
	cp := Carve(&t.slab, len(msgs), stageChunk) // consecutive records' copies share a chunk
	copy(cp, msgs)
	t.staged[h] = cp
	return nil
}

// stageChunk is how many staged messages one allocation holds.
const stageChunk = 256

// drop forgets what was staged for h, clearing its copies (their chunk
// may outlive them); t.mu is held.
func (t *Transactions[P, M]) drop(h *partitionHandle[P]) {
	clear(t.staged[h])
	delete(t.staged, h)
}

// Discard drops what was staged for handles. It does nothing on a nil
// Transactions.
func (t *Transactions[P, M]) Discard(handles []any) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range handles {
		t.drop(h.(*partitionHandle[P]))
	}
}

// Ack is [Partitions.Ack], refused after a failed transaction until Renew.
func (t *Transactions[P, M]) Ack(handles []any) error {
	t.mu.Lock()
	failed := t.failed
	t.mu.Unlock()
	if failed {
		return fmt.Errorf("transaction failed: %w", driver.ErrRecordsLost)
	}
	return t.Partitions.Ack(handles)
}

// Flush is [Partitions.Flush], joined with a transaction that failed since
// the last Flush.
func (t *Transactions[P, M]) Flush(ctx context.Context) error {
	err := t.Partitions.Flush(ctx)
	t.mu.Lock()
	defer t.mu.Unlock()
	err, t.lost = errors.Join(err, t.lost), nil
	return err
}

// Ending returns the channel closed when the session must end after a
// failed transaction; nil (never closed) on a nil Transactions.
func (t *Transactions[P, M]) Ending() <-chan struct{} {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.end
}

// Renew starts a session (its partitions claimed): transactions are
// committed again, and what was staged for released partitions is
// dropped. It does nothing on a nil Transactions.
func (t *Transactions[P, M]) Renew() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed {
		t.failed, t.end = false, make(chan struct{})
	}
	t.prune()
}

// prune drops what was staged for records of released partitions.
func (t *Transactions[P, M]) prune() {
	for h := range t.staged {
		if h.p.isReleased() {
			t.drop(h)
		}
	}
}

// round is the Partitions' Commit: one transaction of moved and of the
// messages staged for the records below each position.
func (t *Transactions[P, M]) round(moved []Position[P]) error {
	t.mu.Lock()
	if t.failed {
		t.mu.Unlock()
		return errors.New("session ending after a failed transaction")
	}
	t.prune()
	var in []*partitionHandle[P]
	for h := range t.staged {
		if slices.ContainsFunc(moved, func(m Position[P]) bool { return m.ID == h.p.ID && h.off < m.Offset }) {
			in = append(in, h)
		}
	}
	slices.SortFunc(in, func(a, b *partitionHandle[P]) int { return cmp.Compare(a.off, b.off) })
	var msgs []M
	for _, h := range in {
		msgs = append(msgs, t.staged[h]...)
	}
	t.mu.Unlock()
	if err := t.commit(moved, msgs); err != nil {
		return t.fail(err)
	}
	t.mu.Lock()
	for _, h := range in {
		t.drop(h)
	}
	t.mu.Unlock()
	return nil
}

// fail fails the session after a transaction that did not commit.
func (t *Transactions[P, M]) fail(cause error) error {
	err := fmt.Errorf("transaction aborted, its records come again: %w", errors.Join(driver.ErrRecordsLost, cause))
	t.mu.Lock()
	t.lost = err
	if !t.failed {
		t.failed = true
		close(t.end)
	}
	t.mu.Unlock()
	if t.report != nil {
		t.report(err)
	}
	return err
}

func (p *Partition[P]) isReleased() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released
}
