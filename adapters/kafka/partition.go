package kafka

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// recordState is where a record is between fetch and commit.
type recordState uint8

const (
	stateBuffered recordState = iota // held by the adapter (key, delay, ready queue)
	stateOut                         // handed out by Receive, not settled
	stateSettling                    // a Settle is publishing for it
	stateDone                        // settled; counts towards the commit prefix
)

// record is one consumed Kafka record, from fetch to commit.
type record struct {
	s        *subscription
	p        *partition
	offset   int64
	dec      decoded
	received time.Time
	// first is the record's first Delivery, made in the same allocation
	// (a record is handed out again only after a failed settlement; later
	// hand-outs allocate their own).
	first ports.Delivery
	// facts are the record's broker facts, built by its claim goroutine
	// (accept) and shared by every hand-out of it (a Delivery's Facts are
	// read-only): the hand-out, which runs on the core's receive loop under
	// the subscription's lock, only points at them.
	facts map[string]string

	// Guarded by p.mu.
	state  recordState
	action ports.Action // the action that settled it (stateDone)
	local  int          // local redeliveries after a failed settlement
	handed bool         // first was handed out
}

// partition is one partition claimed in one consumer-group session
// (generation). A partition claimed again in a later session is a new
// partition value: nothing carries over but the committed offset.
type partition struct {
	topic  string // physical
	id     int32
	gen    int32
	member string

	// revoked is set once, under mu, when the session lets the partition
	// go; it is also readable without mu.
	revoked atomic.Bool

	mu sync.Mutex
	// log holds the records fetched and not yet below mark, in offset
	// order; log[head:] is live.
	log  []*record
	head int
	// mark is the commit position: every fetched offset below it is done.
	mark int64
	// committed is the last position the broker accepted (-1: none).
	committed int64
	// keys maps a key with a record out (or held) to the records of the
	// same key waiting behind it, in offset order.
	keys map[string][]*record

	// Formatted once for every record's facts.
	idText, genText string
	// names interns header names; only the partition's claim goroutine
	// (which decodes its records) uses it.
	names *interner
}

func newPartition(topic string, id, gen int32, member string, start, committed int64) *partition {
	return &partition{
		topic: topic, id: id, gen: gen, member: member,
		mark: start, committed: committed,
		keys:   make(map[string][]*record),
		idText: strconv.Itoa(int(id)), genText: strconv.Itoa(int(gen)),
		names: newInterner(),
	}
}

// add appends a fetched record. avail reports whether it may be made
// available now (false: it waits behind an earlier record of its key);
// live is false when the partition was revoked (the record is dropped).
func (p *partition) add(r *record) (avail, live bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked.Load() {
		return false, false
	}
	p.log = append(p.log, r)
	k := r.dec.msg.Key
	if k == "" {
		return true, true
	}
	if q, busy := p.keys[k]; busy {
		p.keys[k] = append(q, r)
		return false, true
	}
	p.keys[k] = nil
	return true, true
}

// complete marks r done with action a (the completion is recorded),
// advances mark over the completed prefix and frees r's key. It returns
// the next record of the key to make available (nil if none). It returns
// ErrRevoked when the partition was revoked.
func (p *partition) complete(r *record, a ports.Action) (next *record, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked.Load() {
		return nil, p.revokedErr()
	}
	r.state, r.action = stateDone, a
	for p.head < len(p.log) && p.log[p.head].state == stateDone {
		p.mark = p.log[p.head].offset + 1
		p.log[p.head] = nil
		p.head++
	}
	if p.head > 64 && p.head*2 > len(p.log) {
		n := copy(p.log, p.log[p.head:])
		clear(p.log[n:])
		p.log, p.head = p.log[:n], 0
	}
	return p.releaseKeyLocked(r.dec.msg.Key), nil
}

// releaseKeyLocked frees key and returns the next waiting record of it.
func (p *partition) releaseKeyLocked(k string) *record {
	if k == "" {
		return nil
	}
	q, ok := p.keys[k]
	if !ok {
		return nil
	}
	if len(q) == 0 {
		delete(p.keys, k)
		return nil
	}
	next := q[0]
	q[0] = nil
	p.keys[k] = q[1:]
	return next
}

// dirty returns the position to commit, if any (mu not held).
func (p *partition) dirty() (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked.Load() || p.mark <= p.committed {
		return 0, false
	}
	return p.mark, true
}

// committedTo records that the broker accepted the commit of pos.
func (p *partition) committedTo(pos int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pos > p.committed {
		p.committed = pos
	}
}

// revoke fences the partition: nothing of it is committed or handed out
// afterwards. The caller holds the committer's fence. It returns how many
// records waiting behind their key it dropped.
func (p *partition) revoke() (dropped int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked.Swap(true) {
		return 0
	}
	for _, q := range p.keys {
		dropped += len(q)
	}
	p.keys = nil
	clear(p.log)
	p.log = nil
	return dropped
}

func (p *partition) revokedErr() error {
	return &RevokedError{Topic: p.topic, Partition: p.id, Generation: p.gen}
}
