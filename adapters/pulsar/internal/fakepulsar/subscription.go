package fakepulsar

import (
	"sort"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

type topic struct {
	name    string
	entries []*entry
	subs    map[string]*subscription
}

// subscription is a durable cursor over a topic.
type subscription struct {
	t    *topic
	name string
	typ  pulsar.SubscriptionType

	start   int               // entries before start are treated as acknowledged
	cursor  int               // next entry never read since the last rewind
	acked   map[int]bool      // individually acknowledged entries
	pending map[int]*consumer // dispatched and not acknowledged
	replay  []int             // entries to redeliver first, sorted
	delayed map[int]bool      // read but not yet due (a wake-up is scheduled)
	counts  map[int]uint32    // redelivery counts (Shared only)

	consumers []*consumer
	rr        int
}

func newSubscription(t *topic, name string, typ pulsar.SubscriptionType, pos pulsar.SubscriptionInitialPosition) *subscription {
	s := &subscription{t: t, name: name, typ: typ, acked: map[int]bool{}, pending: map[int]*consumer{},
		delayed: map[int]bool{}, counts: map[int]uint32{}}
	if pos == pulsar.SubscriptionPositionLatest {
		s.start = len(t.entries)
	}
	s.cursor = s.start
	return s
}

// rewind makes every unacknowledged entry readable again, as a broker does
// when the first consumer joins a subscription without consumers.
func (s *subscription) rewind() {
	s.cursor = s.start
	s.replay = nil
	s.counts = map[int]uint32{}
	s.pending = map[int]*consumer{}
}

// addReplay queues entry i for redelivery, keeping replay sorted.
func (s *subscription) addReplay(i int) {
	at := sort.SearchInts(s.replay, i)
	if at < len(s.replay) && s.replay[at] == i {
		return
	}
	s.replay = append(s.replay, 0)
	copy(s.replay[at+1:], s.replay[at:])
	s.replay[at] = i
}

// pick returns the next consumer, round-robin, with room in its queue.
func (s *subscription) pick() *consumer {
	for n := 0; n < len(s.consumers); n++ {
		c := s.consumers[(s.rr+n)%len(s.consumers)]
		if !c.closed && len(c.queue) < c.capacity {
			s.rr = (s.rr + n + 1) % len(s.consumers)
			return c
		}
	}
	return nil
}

// dispatchLocked hands out what it can: redeliveries first, then new
// entries in order; a Shared subscription sets aside entries that are not
// due yet and wakes up for them.
func (b *Broker) dispatchLocked(s *subscription) {
	if len(s.consumers) == 0 {
		return
	}
	for len(s.replay) > 0 {
		i := s.replay[0]
		if s.acked[i] || s.pending[i] != nil {
			s.replay = s.replay[1:]
			continue
		}
		c := s.pick()
		if c == nil {
			return
		}
		s.replay = s.replay[1:]
		b.deliverLocked(s, i, c)
	}
	now := time.Now()
	for s.cursor < len(s.t.entries) {
		i := s.cursor
		e := s.t.entries[i]
		if s.acked[i] || s.pending[i] != nil {
			s.cursor++
			continue
		}
		if s.typ == pulsar.Shared && !e.deliverAt.IsZero() && e.deliverAt.Sub(now) > b.early {
			s.cursor++
			if !s.delayed[i] {
				s.delayed[i] = true
				b.afterLocked(e.deliverAt.Sub(now)-b.early, nil, func() { b.dueLocked(s, i) })
			}
			continue
		}
		c := s.pick()
		if c == nil {
			return
		}
		s.cursor++
		b.deliverLocked(s, i, c)
	}
}

// dueLocked moves a delayed entry to the replay queue once it is due.
func (b *Broker) dueLocked(s *subscription, i int) {
	delete(s.delayed, i)
	if b.topics[s.t.name] != s.t || s.t.subs[s.name] != s {
		return // unsubscribed meanwhile
	}
	s.addReplay(i)
	b.dispatchLocked(s)
}

func (b *Broker) deliverLocked(s *subscription, i int, c *consumer) {
	s.pending[i] = c
	c.enqueue(newMessage(s.t.entries[i], s.counts[i]))
}

// redeliverLocked handles a nack whose delay is over.
func (b *Broker) redeliverLocked(s *subscription, c *consumer, i int) {
	if c.closed || s.pending[i] != c {
		return // already acknowledged, or given back by Close
	}
	if s.typ != pulsar.Shared {
		// Exclusive: no redelivery tracking; every unacknowledged message
		// of the consumer is rewound and sent again.
		for j, pc := range s.pending {
			if pc == c {
				delete(s.pending, j)
				s.addReplay(j)
			}
		}
		c.queue = nil
		b.record(Event{Op: OpRedeliver, Topic: s.t.name, Subscription: s.name, ID: s.t.entries[i].props["ce-id"], Entry: i})
		b.dispatchLocked(s)
		return
	}
	delete(s.pending, i)
	c.dropQueued(i)
	s.counts[i]++
	s.addReplay(i)
	b.record(Event{Op: OpRedeliver, Topic: s.t.name, Subscription: s.name, ID: s.t.entries[i].props["ce-id"], Entry: i, Count: s.counts[i]})
	b.dispatchLocked(s)
}

// removeLocked detaches a closing consumer and gives its messages back.
func (b *Broker) removeLocked(s *subscription, c *consumer) {
	for n, x := range s.consumers {
		if x == c {
			s.consumers = append(s.consumers[:n], s.consumers[n+1:]...)
			break
		}
	}
	if s.rr >= len(s.consumers) {
		s.rr = 0
	}
	if len(s.consumers) == 0 {
		s.rewind() // counts cleared; the next consumer starts over
		return
	}
	for i, pc := range s.pending {
		if pc == c {
			delete(s.pending, i)
			s.addReplay(i)
		}
	}
	b.dispatchLocked(s)
}
