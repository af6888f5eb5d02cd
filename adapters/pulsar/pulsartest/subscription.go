package pulsartest

import (
	"math/bits"
	"slices"
	"time"
)

// subscription is a cursor over a topic's log with its consumers. All its
// state is guarded by the broker lock.
//
// An entry of the log is, for a subscription, in exactly one of these
// states: acknowledged; pending on one consumer (dispatched, not yet
// acknowledged); waiting in replay (to be dispatched again before new
// entries); held in delayed until its deliver-at time (Shared only); or not
// yet read (id >= readPos).
type subscription struct {
	t       *topic
	name    string
	kind    int32 // subExclusive, subShared or subFailover
	durable bool

	// consumers in subscribe order; for Exclusive and Failover the first
	// one is the active consumer (Pulsar's rule for non-partitioned topics).
	consumers []*consumer
	rr        int // next Shared consumer to try

	readPos    uint64
	markDelete int64               // every entry <= markDelete is acknowledged
	acked      map[uint64]struct{} // acknowledged entries above markDelete
	partial    map[uint64][]uint64 // batch entries with some indexes acknowledged: bit set = not yet
	owner      map[uint64]*consumer
	replay     []uint64 // ascending, unique
	redelivery map[uint64]uint32
	delayed    map[uint64]int64 // entry -> deliver-at, Unix ms

	timer    *time.Timer
	timerAt  int64
	timerGen uint64
	removed  bool
}

// consumer is a consumer registered on a connection.
type consumer struct {
	c       *conn
	id      uint64
	name    string
	sub     *subscription
	permits int64
	pending map[uint64]struct{}
}

func newSubscription(t *topic, name string, kind int32, durable, earliest bool) *subscription {
	s := &subscription{
		t:          t,
		name:       name,
		kind:       kind,
		durable:    durable,
		acked:      map[uint64]struct{}{},
		partial:    map[uint64][]uint64{},
		owner:      map[uint64]*consumer{},
		redelivery: map[uint64]uint32{},
		delayed:    map[uint64]int64{},
	}
	if !earliest || t.nonPersistent { // a non-persistent topic has no history
		s.readPos = uint64(len(t.entries))
	}
	s.markDelete = int64(s.readPos) - 1
	return s
}

func (s *subscription) isAcked(id uint64) bool {
	if int64(id) <= s.markDelete {
		return true
	}
	_, ok := s.acked[id]
	return ok
}

// ackEntry acknowledges a whole entry.
func (s *subscription) ackEntry(id uint64) {
	if s.isAcked(id) {
		return
	}
	s.acked[id] = struct{}{}
	delete(s.partial, id)
	delete(s.redelivery, id)
	delete(s.delayed, id)
	if c := s.owner[id]; c != nil {
		delete(c.pending, id)
		delete(s.owner, id)
	}
	for {
		next := uint64(s.markDelete + 1)
		if _, ok := s.acked[next]; !ok {
			return
		}
		delete(s.acked, next)
		s.markDelete++
	}
}

// ackIndexes acknowledges the batch indexes whose bit is clear in ackSet
// (the client's set of still-unacknowledged indexes). Missing words count as
// unacknowledged.
func (s *subscription) ackIndexes(id uint64, ackSet []int64) {
	if s.isAcked(id) {
		return
	}
	n := int(s.t.entries[id].md.numMessages)
	words := s.partial[id]
	if words == nil {
		words = make([]uint64, (n+63)/64)
		for i := range n {
			words[i/64] |= 1 << (i % 64)
		}
	}
	left := 0
	for i := range words {
		if i < len(ackSet) {
			words[i] &= uint64(ackSet[i])
		}
		left += bits.OnesCount64(words[i])
	}
	if left == 0 {
		s.ackEntry(id)
		return
	}
	s.partial[id] = words
}

// ackCumulative acknowledges every entry before id and, when inclusive,
// id itself: whole, or by batch index when ackSet is given.
func (s *subscription) ackCumulative(id uint64, ackSet []int64, inclusive bool) {
	for e := uint64(s.markDelete + 1); e < id; e++ {
		s.ackEntry(e)
	}
	switch {
	case !inclusive:
	case len(ackSet) > 0:
		s.ackIndexes(id, ackSet)
	default:
		s.ackEntry(id)
	}
}

// dispatch sends entries to consumers while some consumer has permits:
// replayed entries first (in id order), then new ones from the log.
func (s *subscription) dispatch() {
	if s.removed || len(s.consumers) == 0 {
		return
	}
	now := time.Now().UnixMilli()
	for {
		id, fromReplay, ok := s.peek(now)
		if !ok {
			return
		}
		c := s.pick()
		if c == nil {
			return
		}
		if fromReplay {
			s.replay = s.replay[1:]
		} else {
			s.readPos++
		}
		s.deliver(c, id)
	}
}

// peek returns the next entry to dispatch without taking it. Entries read
// from the log whose deliver-at time lies ahead are moved to delayed on a
// Shared subscription (other types deliver them at once, as Pulsar does).
func (s *subscription) peek(now int64) (id uint64, fromReplay, ok bool) {
	for len(s.replay) > 0 {
		id := s.replay[0]
		if s.isAcked(id) || s.owner[id] != nil {
			s.replay = s.replay[1:]
			continue
		}
		return id, true, true
	}
	for s.readPos < uint64(len(s.t.entries)) {
		id := s.readPos
		if s.isAcked(id) || s.owner[id] != nil {
			s.readPos++
			continue
		}
		if at := s.t.entries[id].md.deliverAtTime; s.kind == subShared && at > now && !s.t.nonPersistent {
			s.delayed[id] = at
			s.readPos++
			s.schedule(at)
			continue
		}
		return id, false, true
	}
	return 0, false, false
}

// pick chooses the consumer for the next entry: round robin over Shared
// consumers with permits, or the active consumer.
func (s *subscription) pick() *consumer {
	if s.kind != subShared {
		if c := s.consumers[0]; c.permits > 0 {
			return c
		}
		return nil
	}
	n := len(s.consumers)
	for i := range n {
		c := s.consumers[(s.rr+i)%n]
		if c.permits > 0 {
			s.rr = (s.rr + i + 1) % n
			return c
		}
	}
	return nil
}

func (s *subscription) deliver(c *consumer, id uint64) {
	e := s.t.entries[id]
	var count uint32
	if s.kind == subShared {
		count = s.redelivery[id]
	}
	var ackSet []int64
	for _, w := range s.partial[id] {
		ackSet = append(ackSet, int64(w))
	}
	mid := messageID{ledger: s.t.ledger, entry: id, partition: -1, batchIndex: -1}
	cmd := messageCmd(c.id, mid, count, ackSet)
	c.c.enqueue(appendFrame(make([]byte, 0, 8+len(cmd)+len(e.data)), cmd, e.data), time.Time{})
	s.owner[id] = c
	c.pending[id] = struct{}{}
	c.permits -= int64(e.md.numMessages)
}

// requeue takes an entry back from its consumer for dispatch again.
func (s *subscription) requeue(c *consumer, id uint64) {
	if s.t.nonPersistent { // nothing is stored: what would come back is dropped
		s.ackEntry(id)
		return
	}
	delete(c.pending, id)
	delete(s.owner, id)
	if i, found := slices.BinarySearch(s.replay, id); !found {
		s.replay = slices.Insert(s.replay, i, id)
	}
}

// redeliver carries out REDELIVER_UNACKNOWLEDGED_MESSAGES from c. On a
// Shared subscription the listed entries pending on c (all of them when ids
// is empty) are dispatched again with their redelivery count incremented.
// On Exclusive and Failover, as in Pulsar, the cursor is rewound: every
// entry pending on the active consumer is dispatched again in order and no
// redelivery count is kept.
func (s *subscription) redeliver(c *consumer, ids []uint64) {
	if s.kind == subShared {
		if len(ids) == 0 {
			ids = sortedKeys(c.pending)
		}
		for _, id := range ids {
			if s.owner[id] == c {
				s.redelivery[id]++
				s.requeue(c, id)
			}
		}
	} else if len(s.consumers) > 0 && s.consumers[0] == c {
		for _, id := range sortedKeys(c.pending) {
			s.requeue(c, id)
		}
	}
	s.dispatch()
}

// removeConsumer detaches c. Its pending entries are dispatched again to
// the remaining consumers with their redelivery count unchanged (as Pulsar
// does). A non-durable subscription goes away with its last consumer.
func (s *subscription) removeConsumer(c *consumer) {
	i := slices.Index(s.consumers, c)
	if i < 0 {
		return
	}
	s.consumers = slices.Delete(s.consumers, i, i+1)
	if s.rr > i {
		s.rr--
	}
	if len(s.consumers) > 0 {
		s.rr %= len(s.consumers)
	} else {
		s.rr = 0
	}
	for _, id := range sortedKeys(c.pending) {
		s.requeue(c, id)
	}
	if s.kind == subFailover && i == 0 && len(s.consumers) > 0 {
		s.notifyActive()
	}
	if (!s.durable || s.t.nonPersistent) && len(s.consumers) == 0 {
		s.remove()
		return
	}
	s.dispatch()
}

// notifyActive tells every Failover consumer whether it is the active one.
func (s *subscription) notifyActive() {
	for i, c := range s.consumers {
		c.c.reply(activeConsumerChangeCmd(c.id, i == 0))
	}
}

// remove deletes the subscription from its topic.
func (s *subscription) remove() {
	s.removed = true
	s.stopTimer()
	if s.t.subs[s.name] == s {
		delete(s.t.subs, s.name)
	}
}

// schedule arms the delayed-delivery timer for deliver-at time at (Unix ms)
// unless it is already armed for an earlier time.
func (s *subscription) schedule(at int64) {
	if s.removed || s.t.b.closed {
		return
	}
	if s.timer != nil && s.timerAt <= at {
		return
	}
	s.stopTimer()
	s.timerAt = at
	gen := s.timerGen
	s.timer = time.AfterFunc(time.Until(time.UnixMilli(at)), func() { s.onTimer(gen) })
}

func (s *subscription) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.timerGen++ // a callback already running becomes stale
}

// onTimer moves due delayed entries to replay and dispatches them.
func (s *subscription) onTimer(gen uint64) {
	b := s.t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen != s.timerGen || s.removed || b.closed {
		return
	}
	s.timer = nil
	now := time.Now().UnixMilli()
	next := int64(0)
	for id, at := range s.delayed {
		if at <= now {
			delete(s.delayed, id)
			if i, found := slices.BinarySearch(s.replay, id); !found {
				s.replay = slices.Insert(s.replay, i, id)
			}
		} else if next == 0 || at < next {
			next = at
		}
	}
	if next != 0 {
		s.schedule(next)
	}
	s.dispatch()
}

func sortedKeys(m map[uint64]struct{}) []uint64 {
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
