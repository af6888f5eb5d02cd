package kit

import (
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

	mu         sync.Mutex
	staged     []stagedMsgs[P, M] // in the order the records were first staged; a dropped entry is zero until compact
	dropped    int                // zero entries in staged
	publishing bool               // a round publishes from staged: tidy leaves it uncompacted
	slab       []M                // where Stage copies a record's messages to, a chunk at a time
	parts      partitionLookup[P] // a pass over staged's partitions, under mu
	end        chan struct{}      // closed after a failed transaction
	failed     bool               // this session's transaction failed
	lost       error              // a failed transaction, until Flush returns it

	out []M // the messages of the round under way; rounds run one at a time (under the fence)
}

// stagedMsgs are the copies of the messages staged for the record of h.
type stagedMsgs[P any, M any] struct {
	h    *partitionHandle[P]
	msgs []M
	in   bool // below its partition's position in the last round that looked
}

// NewTransactions returns the state of one transactional consumer and
// starts its commit loop. o.Commit is not used: commit gets the moved
// positions and the messages staged for the records below them, publishes
// them and stores the positions in one transaction, or aborts it and
// returns why; it must not keep msgs. The messages come in staging
// order: a record's together, the records in the order of their first
// Stage (within a key, the order its records were handed out in, since
// a record's successor is out only once it is acknowledged). report, when
// not nil, is told of each failed transaction as it happens.
func NewTransactions[P comparable, M any](o PartitionsOptions[P], commit func(moved []Position[P], msgs []M) error, report func(error)) *Transactions[P, M] {
	t := &Transactions[P, M]{commit: commit, report: report, end: make(chan struct{})}
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
	if i := h.staged; i > 0 { // staged before: its messages stay in its place
		e := &t.staged[i-1]
		e.msgs = append(e.msgs, msgs...)
		return nil
	}
	cp := Carve(&t.slab, len(msgs), stageChunk) // consecutive records' copies share a chunk
	copy(cp, msgs)
	t.staged = append(t.staged, stagedMsgs[P, M]{h: h, msgs: cp})
	h.staged = len(t.staged)
	return nil
}

// stageChunk is how many staged messages one allocation holds.
const stageChunk = 256

// drop forgets the staged entry at i, clearing its copies (their chunk
// may outlive them) and leaving a zero entry for a round to compact away;
// t.mu is held.
func (t *Transactions[P, M]) drop(i int) {
	e := &t.staged[i]
	clear(e.msgs)
	e.h.staged = 0
	*e = stagedMsgs[P, M]{}
	t.dropped++
}

// tidy compacts the staged list when most of it was dropped and no round
// publishes from it (records requeued again and again behind one still
// out would grow it otherwise); t.mu is held.
func (t *Transactions[P, M]) tidy() {
	if !t.publishing && 2*t.dropped > len(t.staged) {
		t.compact(0)
	}
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
		if i := h.(*partitionHandle[P]).staged; i > 0 {
			t.drop(i - 1)
		}
	}
	t.tidy()
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
	for i := range t.staged {
		if h := t.staged[i].h; h != nil && t.parts.position(h.p, nil) < 0 {
			t.drop(i)
		}
	}
	t.parts.reset()
	t.tidy()
}

// round is the Partitions' Commit: one transaction of moved and of the
// messages staged for the records below each position, in staging order.
// What was staged for a released partition is dropped on the way.
func (t *Transactions[P, M]) round(moved []Position[P]) error {
	t.mu.Lock()
	if t.failed {
		t.mu.Unlock()
		return errors.New("session ending after a failed transaction")
	}
	out := t.out[:0]
	for i := range t.staged {
		e := &t.staged[i]
		if e.h == nil {
			continue
		}
		switch pos := t.parts.position(e.h.p, moved); {
		case pos < 0:
			t.drop(i)
		case e.h.off < pos:
			e.in = true
			out = append(out, e.msgs...)
		default:
			e.in = false
		}
	}
	t.parts.reset()
	n := len(t.staged) // Stage appends while the transaction runs, Discard and prune zero entries
	t.publishing = true
	t.mu.Unlock()
	err := t.commit(moved, out)
	clear(out)
	t.out = out[:0]
	t.mu.Lock()
	t.publishing = false
	if err == nil {
		t.compact(n)
	}
	t.mu.Unlock()
	if err != nil {
		return t.fail(err)
	}
	return nil
}

// compact removes from the staged list the dropped entries and those of
// its first n that the round published, the others keeping their order;
// t.mu is held and no round is publishing from the list.
func (t *Transactions[P, M]) compact(n int) {
	kept := 0
	for i := range t.staged {
		e := t.staged[i]
		switch {
		case e.h == nil:
		case i < n && e.in:
			clear(e.msgs)
			e.h.staged = 0
		default:
			t.staged[kept] = e
			e.h.staged = kept + 1
			kept++
		}
	}
	clear(t.staged[kept:])
	t.staged, t.dropped = t.staged[:kept], 0
}

// partitionLookup is the partitions one pass over the staged list met,
// each looked up once: whether it was released and the position a round
// commits for it.
type partitionLookup[P comparable] struct {
	parts []*Partition[P]
	pos   []int64
	last  int // the index of the partition looked up last
}

// position is the position moved has for p (0 when none), -1 when p was
// released.
func (l *partitionLookup[P]) position(p *Partition[P], moved []Position[P]) int64 {
	if l.last < len(l.parts) && l.parts[l.last] == p { // a partition's records are often staged in a run
		return l.pos[l.last]
	}
	i := slices.Index(l.parts, p)
	if i < 0 {
		pos := int64(0)
		if p.isReleased() {
			pos = -1
		} else if j := slices.IndexFunc(moved, func(m Position[P]) bool { return m.ID == p.ID }); j >= 0 {
			pos = moved[j].Offset
		}
		i = len(l.parts)
		l.parts, l.pos = append(l.parts, p), append(l.pos, pos)
	}
	l.last = i
	return l.pos[i]
}

// reset ends a pass, keeping no partition.
func (l *partitionLookup[P]) reset() {
	clear(l.parts)
	l.parts, l.pos, l.last = l.parts[:0], l.pos[:0], 0
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
