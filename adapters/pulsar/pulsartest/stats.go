package pulsartest

import (
	"math/bits"
	"slices"
)

// Counters are running totals since Start.
type Counters struct {
	// Connections is the number of client connections accepted.
	Connections int
	// Sends is the number of well-formed SENDs from known producers,
	// counted before any fault applies.
	Sends int
	// FailedSends is the number of SENDs refused by a fault (Fail).
	FailedSends int
	// WithheldReceipts is the number of receipts never sent (Withhold).
	WithheldReceipts int
	// DelayedReceipts is the number of receipts held back (Delay).
	DelayedReceipts int
}

// Counters returns the running totals.
func (b *Broker) Counters() Counters {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counters
}

// TopicStats is a snapshot of one topic.
type TopicStats struct {
	// Entries is the number of stored entries (one per SEND; a batch is one).
	Entries int
	// Messages is the number of stored messages, batches counted in full
	// and each chunk of a chunked message counted as one (as Pulsar does).
	Messages int
	// Chunks is the number of stored entries that are chunks of a larger
	// message (num_chunks_from_msg above 1), and ChunkedMessages the number
	// of distinct chunked messages (by uuid) among them.
	Chunks, ChunkedMessages int
	// Producers is the number of connected producers.
	Producers int
	// Subscriptions lists the topic's subscriptions, sorted.
	Subscriptions []string
}

// SubscriptionStats is a snapshot of one subscription.
type SubscriptionStats struct {
	// Type is "Exclusive", "Shared" or "Failover".
	Type string
	// Durable is false for a reader's (non-durable) subscription.
	Durable bool
	// Consumers lists the connected consumers in subscribe order (for
	// Exclusive and Failover the first is the active one).
	Consumers []ConsumerStats
	// Backlog is the number of messages not yet acknowledged (batch
	// indexes acknowledged one by one are subtracted).
	Backlog int
	// Unacked is the number of backlog messages dispatched to a consumer.
	Unacked int
	// Delayed is the number of messages held until their deliver-at time.
	Delayed int
}

// ConsumerStats is a snapshot of one connected consumer.
type ConsumerStats struct {
	// Name is the consumer name the client gave.
	Name string
	// Permits is the number of messages the consumer may still be sent
	// (FLOW permits not yet used; negative after a large batch).
	Permits int64
	// Unacked is the number of messages dispatched to it and not yet
	// acknowledged.
	Unacked int
}

// Topic returns a snapshot of a topic; ok is false when it does not exist.
// Short names get the client defaults ("t" is persistent://public/default/t).
func (b *Broker) Topic(name string) (st TopicStats, ok bool) {
	full, err := parseTopic(name)
	if err != nil {
		return st, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[full]
	if !ok {
		return st, false
	}
	st.Entries = len(t.entries)
	chunked := map[string]bool{}
	for _, e := range t.entries {
		st.Messages += int(e.md.numMessages)
		if e.md.numChunks > 1 {
			st.Chunks++
			chunked[e.md.uuid] = true
		}
	}
	st.ChunkedMessages = len(chunked)
	st.Producers = len(t.producers)
	for name := range t.subs {
		st.Subscriptions = append(st.Subscriptions, name)
	}
	slices.Sort(st.Subscriptions)
	return st, true
}

// Subscription returns a snapshot of a subscription; ok is false when the
// topic or the subscription does not exist.
func (b *Broker) Subscription(topicName, subscription string) (st SubscriptionStats, ok bool) {
	full, err := parseTopic(topicName)
	if err != nil {
		return st, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.topics[full]
	if !ok {
		return st, false
	}
	s, ok := t.subs[subscription]
	if !ok {
		return st, false
	}
	st.Type = map[int32]string{subExclusive: "Exclusive", subShared: "Shared", subFailover: "Failover"}[s.kind]
	st.Durable = s.durable
	for _, c := range s.consumers {
		cs := ConsumerStats{Name: c.name, Permits: c.permits}
		for id := range c.pending {
			cs.Unacked += s.unackedMessages(id)
		}
		st.Consumers = append(st.Consumers, cs)
	}
	for id := uint64(s.markDelete + 1); id < uint64(len(t.entries)); id++ {
		if s.isAcked(id) {
			continue
		}
		n := s.unackedMessages(id)
		st.Backlog += n
		if s.owner[id] != nil {
			st.Unacked += n
		}
		if _, ok := s.delayed[id]; ok {
			st.Delayed += n
		}
	}
	return st, true
}

// unackedMessages counts the messages of an unacknowledged entry that are
// still unacknowledged.
func (s *subscription) unackedMessages(id uint64) int {
	words, ok := s.partial[id]
	if !ok {
		return int(s.t.entries[id].md.numMessages)
	}
	n := 0
	for _, w := range words {
		n += bits.OnesCount64(w)
	}
	return n
}
