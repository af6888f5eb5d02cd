package kit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
)

// Partitions is the acknowledgement state of one consumer of a
// partitioned log whose broker stores a committed position per partition
// (a Kafka consumer-group member; any log consumed by offset), from fetch
// to commit: gap-free commits written once.
//
// The driver claims each partition it is assigned ([Partitions.Claim]),
// adds the records it fetches in offset order ([Partitions.Add]) and hands
// out the ready ones ([Partitions.Take]); within a partition one record
// per non-empty key is out at a time ([KeyHold]). SendAcks marks offsets
// done in any order, without I/O ([Partitions.Ack]). Each partition's
// position is the end of its done prefix ([Offsets]), so a commit never
// skips a record still out; the moved positions go to Commit every
// Interval, once Threshold acknowledgements were recorded, and at
// [Partitions.Flush]. [Partitions.Release] commits a partition a last
// time and fences it: the commit round under way finishes first, and from
// then on nothing of it is handed out or committed, and acknowledging one
// of its records fails with an error wrapping driver.ErrRecordsLost (its
// new owner redelivers them).
//
// P is the driver's identity of a claimed partition (topic, number,
// generation). Safe for concurrent use; call Close to stop the commit
// loop.
type Partitions[P any] struct {
	o        PartitionsOptions[P]
	fence    sync.Mutex   // held by a commit round and by a release
	recorded atomic.Int64 // acknowledgements since the last round
	kick     chan struct{}
	stop     chan struct{}
	loop     sync.WaitGroup

	mu      sync.Mutex
	claimed map[*Partition[P]]struct{}
	ready   []driver.Record // ready[head:] wait to be taken; the storage is reused, never slid off
	head    int
	held    int // records waiting behind their key
}

// PartitionsOptions configure [Partitions]. Commit is required.
type PartitionsOptions[P any] struct {
	// Commit stores the moved positions with the broker: nil when it
	// accepted all, else why not, having set Stored on each one it
	// accepted all the same. It is called under the fence, one round at a
	// time.
	Commit func(moved []Position[P]) error
	// Interval between commit rounds (default 100ms); Threshold
	// acknowledgements recorded since the last round start one at once
	// (default 1000); Retry paces Flush's retries (default 200ms).
	Interval  time.Duration
	Threshold int
	Retry     time.Duration
	// Wake, when not nil, is signalled without blocking when a record
	// waiting behind its key becomes ready and when a partition is
	// released.
	Wake chan struct{}
}

// Partition is one claimed partition of a [Partitions].
type Partition[P any] struct {
	ID P

	mu        sync.Mutex
	released  bool
	offs      Offsets
	committed int64 // the broker's position (-1: none)
	hold      KeyHold[driver.Record]
	handles   []partitionHandle[P] // carved one a record, a chunk at a time
}

// Position is a partition's position to commit: the next offset to read.
type Position[P any] struct {
	ID     P
	Offset int64
	Stored bool // set by a Commit that failed on each the broker accepted
}

type partitionHandle[P any] struct {
	p   *Partition[P]
	off int64
	key string
	// staged is 1 + the index of the record's entry in the staged list of
	// a Transactions, 0 when it has none; guarded by that Transactions' mu.
	staged int
}

// NewPartitions returns the state of one consumer and starts its commit
// loop.
func NewPartitions[P any](o PartitionsOptions[P]) *Partitions[P] {
	o.Interval = cmp.Or(max(o.Interval, 0), 100*time.Millisecond)
	o.Threshold = cmp.Or(max(o.Threshold, 0), 1000)
	o.Retry = cmp.Or(max(o.Retry, 0), 200*time.Millisecond)
	ps := &Partitions[P]{o: o, kick: make(chan struct{}, 1), stop: make(chan struct{}), claimed: map[*Partition[P]]struct{}{}}
	ps.loop.Go(ps.commitLoop)
	return ps
}

// Claim starts a partition whose next record is at offset start;
// committed is the position the broker has (-1: none), so that the first
// round commits start when it differs.
func (ps *Partitions[P]) Claim(id P, start, committed int64) *Partition[P] {
	p := &Partition[P]{ID: id, offs: NewOffsets(start), committed: committed}
	ps.mu.Lock()
	ps.claimed[p] = struct{}{}
	ps.mu.Unlock()
	return p
}

// Add takes r, read at offset off of p (offsets increase per partition),
// and sets its Handle. r is ready unless its key has a record out (it
// waits) or skip is true (done at once, never handed out: a record the
// consumer filters out). A record of a released partition is dropped.
func (ps *Partitions[P]) Add(p *Partition[P], off int64, r driver.Record, skip bool) {
	ps.AddTo(nil, 0, p, off, &r, skip)
}

// AddTo is Add, but a ready record goes to out instead of the ready queue
// when nothing ready waits before it and out holds fewer than max: a
// receiver that takes what is ready ([Partitions.Take]) and then adds
// what it fetched hands those records out without queueing them. It
// returns out, and sets r's Handle.
func (ps *Partitions[P]) AddTo(out []driver.Record, max int, p *Partition[P], off int64, r *driver.Record, skip bool) []driver.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return out
	}
	h := &Carve(&p.handles, 1, 32)[0]
	*h = partitionHandle[P]{p: p, off: off, key: r.Message.Key}
	r.Handle = h
	p.offs.Add(off, skip)
	if skip {
		ps.recorded.Add(1)
		return out
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	switch {
	case !p.hold.Admit(h.key, r):
		ps.held++
	case len(out) < max && ps.head == len(ps.ready):
		out = append(out, *r)
	default:
		ps.push(*r)
	}
	return out
}

// Take appends up to max ready records to out, oldest first.
func (ps *Partitions[P]) Take(out []driver.Record, max int) []driver.Record {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := min(max, len(ps.ready)-ps.head)
	out = append(out, ps.ready[ps.head:ps.head+n]...)
	clear(ps.ready[ps.head : ps.head+n])
	ps.head += n
	if ps.head == len(ps.ready) {
		ps.ready, ps.head = ps.ready[:0], 0 // its storage again, from the start
	}
	return out
}

// push appends r to the ready queue, moving what waits to the front of its
// storage when it is full (under ps.mu): a queue that is never empty when
// taken from does not grow into new storage on every append.
func (ps *Partitions[P]) push(r driver.Record) {
	if len(ps.ready) == cap(ps.ready) && ps.head > 0 {
		ps.compact()
	}
	ps.ready = append(ps.ready, r)
}

// compact moves the waiting records to the front of ready's storage.
func (ps *Partitions[P]) compact() {
	n := copy(ps.ready, ps.ready[ps.head:])
	clear(ps.ready[n:])
	ps.ready, ps.head = ps.ready[:n], 0
}

// Pending is the number of records added and not taken yet.
func (ps *Partitions[P]) Pending() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.held + len(ps.ready) - ps.head
}

// Ack marks the offsets of handles done, for the next commit round; the
// next record of each key becomes ready. If a partition of theirs was
// released it records none and returns an error wrapping
// driver.ErrRecordsLost. A run of handles of one partition takes its lock
// once (a round's handles mostly come a partition at a time).
func (ps *Partitions[P]) Ack(handles []any) error {
	for i := 0; i < len(handles); {
		p, n := runOf[P](handles[i:])
		p.mu.Lock()
		released := p.released
		p.mu.Unlock()
		if released {
			return fmt.Errorf("partition %v released: %w", p.ID, driver.ErrRecordsLost)
		}
		i += n
	}
	for i := 0; i < len(handles); {
		p, n := runOf[P](handles[i:])
		if p.done(handles[i:i+n], ps) {
			Signal(ps.o.Wake)
		}
		i += n
	}
	if ps.recorded.Add(int64(len(handles))) >= int64(ps.o.Threshold) {
		Signal(ps.kick)
	}
	return nil
}

// runOf returns the partition of handles[0] and how many handles from the
// first are of it.
func runOf[P any](handles []any) (*Partition[P], int) {
	p, n := handles[0].(*partitionHandle[P]).p, 1
	for n < len(handles) && handles[n].(*partitionHandle[P]).p == p {
		n++
	}
	return p, n
}

// done marks the offsets of handles, all of p, done and makes the next
// record of each of their keys ready in ps; it reports whether one was.
func (p *Partition[P]) done(handles []any, ps *Partitions[P]) (ready bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return false
	}
	for _, x := range handles {
		h := x.(*partitionHandle[P])
		p.offs.Done(h.off)
		if next, ok := p.hold.Release(h.key); ok {
			ps.mu.Lock() // after p.mu, as in AddTo
			ps.push(next)
			ps.held--
			ps.mu.Unlock()
			ready = true
		}
	}
	return ready
}

// Signal wakes the waiter on ch, a channel of capacity 1, without
// blocking: a wake-up already pending stands for this one too.
func Signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (ps *Partitions[P]) commitLoop() {
	tick := time.NewTicker(ps.o.Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ps.kick:
		case <-ps.stop:
			return
		}
		_ = ps.commit(ps.all()...) // a failed round is retried on the next
	}
}

func (ps *Partitions[P]) all() []*Partition[P] {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]*Partition[P], 0, len(ps.claimed))
	for p := range ps.claimed {
		out = append(out, p)
	}
	return out
}

// commit sends the positions of the partitions of list that moved since
// their last commit (at most one Commit call), under the fence.
func (ps *Partitions[P]) commit(list ...*Partition[P]) error {
	ps.fence.Lock()
	defer ps.fence.Unlock()
	ps.recorded.Store(0)
	var moved []Position[P]
	var parts []*Partition[P]
	for _, p := range list {
		p.mu.Lock()
		if pos := p.offs.Mark(); !p.released && pos > p.committed {
			moved, parts = append(moved, Position[P]{ID: p.ID, Offset: pos}), append(parts, p)
		}
		p.mu.Unlock()
	}
	if len(moved) == 0 {
		return nil
	}
	err := ps.o.Commit(moved)
	for i, p := range parts {
		if err == nil || moved[i].Stored {
			p.mu.Lock()
			p.committed = max(p.committed, moved[i].Offset)
			p.mu.Unlock()
		}
	}
	return err
}

// Flush commits every claimed partition's position now, retrying a
// failed round every Retry until ctx is done.
func (ps *Partitions[P]) Flush(ctx context.Context) error {
	for {
		err := ps.commit(ps.all()...)
		if err == nil {
			return nil
		}
		t := time.NewTimer(ps.o.Retry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		}
	}
}

// ReleaseAll releases every claimed partition.
func (ps *Partitions[P]) ReleaseAll() { ps.Release(ps.all()...) }

// Release commits what list recorded (best effort), then fences it:
// its ready and waiting records are dropped, nothing of it is committed
// or handed out again.
func (ps *Partitions[P]) Release(list ...*Partition[P]) {
	_ = ps.commit(list...)
	ps.fence.Lock()
	defer ps.fence.Unlock()
	dropped := 0
	for _, p := range list {
		p.mu.Lock()
		p.released = true
		dropped += p.hold.Waiting()
		p.hold, p.offs = KeyHold[driver.Record]{}, Offsets{}
		p.mu.Unlock()
	}
	ps.mu.Lock()
	for _, p := range list {
		delete(ps.claimed, p)
	}
	ps.held -= dropped
	ps.compact()
	ps.ready = slices.DeleteFunc(ps.ready, func(r driver.Record) bool {
		return slices.Contains(list, r.Handle.(*partitionHandle[P]).p)
	})
	ps.mu.Unlock()
	Signal(ps.o.Wake)
}

// Close stops the commit loop (it commits nothing more; Release and
// Flush still do).
func (ps *Partitions[P]) Close() {
	close(ps.stop)
	ps.loop.Wait()
}
