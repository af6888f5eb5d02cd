package mem

import (
	"cmp"
	"slices"

	"github.com/sluicemq/sluice/ports"
)

// Stats is a snapshot of a broker's queues and scheduler, for tests,
// dashboards and the quickstart's live summary.
type Stats struct {
	// Queues lists every queue, sorted by namespace, topic, mode, group
	// and instance.
	Queues []QueueStats
	// DelayedMessages counts messages sent with a Delay that are not due
	// yet (they are routed to queues when due).
	DelayedMessages int
	// Scheduled counts every pending scheduler entry: delayed messages,
	// delayed requeues and instance expiries.
	Scheduled int
}

// QueueStats describes one queue.
type QueueStats struct {
	Namespace string
	Topic     ports.Topic
	Mode      ports.Mode
	Group     string
	Instance  string // Broadcast only
	KeyFilter string
	// Consumers is the number of running subscriptions on the queue.
	Consumers int
	// Waiting is the number of consumers inside Receive with room for
	// more deliveries: blocked until a message is ready.
	Waiting int
	// Ready is the number of messages waiting to be received.
	Ready int
	// InFlight is the number of deliveries received and not yet settled.
	InFlight int
	// Delayed is the number of requeued messages waiting for their delay.
	Delayed int
	// MaxReady is the queue's bound on Ready (WithMaxQueue; 0: unbounded).
	MaxReady int
	// Dropped counts the messages the queue dropped unconsumed: past
	// their topic's retention, beyond its MaxLength, best-effort messages
	// that found it full, and best-effort deliveries settled with Requeue
	// or DeadLetter.
	Dropped int
	// SingleActive is true for a single-active group's queue.
	SingleActive bool
}

// Stats returns a snapshot. Each queue is read under its own lock, so the
// snapshot is consistent per queue, not across queues.
func (b *Broker) Stats() Stats {
	b.mu.RLock()
	queues := make([]*queue, 0, len(b.queues))
	for _, q := range b.queues {
		queues = append(queues, q)
	}
	b.mu.RUnlock()

	var st Stats
	st.Scheduled, st.DelayedMessages = b.sched.Len(), int(b.delayedMsgs.Load())
	st.Queues = make([]QueueStats, 0, len(queues))
	for _, q := range queues {
		q.mu.Lock()
		st.Queues = append(st.Queues, QueueStats{
			Namespace: q.key.ns,
			Topic:     q.key.topic,
			Mode:      q.key.mode,
			Group:     q.key.group,
			Instance:  q.key.instance,
			KeyFilter: q.filter,
			Consumers: q.consumers,
			Waiting:   q.receivers,
			Ready:     q.ready.Len(),
			InFlight:  q.inFlight,
			Delayed:   q.delayed,
			MaxReady:  q.max,
			Dropped:   q.dropped,

			SingleActive: q.single,
		})
		q.mu.Unlock()
	}
	slices.SortFunc(st.Queues, func(x, y QueueStats) int {
		return cmp.Or(
			cmp.Compare(x.Namespace, y.Namespace),
			cmp.Compare(x.Topic, y.Topic),
			cmp.Compare(x.Mode, y.Mode),
			cmp.Compare(x.Group, y.Group),
			cmp.Compare(x.Instance, y.Instance),
		)
	})
	return st
}

// Queue returns the stats of the LoadBalance queue of (ns, topic, group),
// or of the Broadcast queue when instance is not empty; ok is false when
// no such queue exists.
func (s Stats) Queue(ns string, topic ports.Topic, group, instance string) (q QueueStats, ok bool) {
	mode := ports.LoadBalance
	if instance != "" {
		mode = ports.Broadcast
	}
	for _, q := range s.Queues {
		if q.Namespace == ns && q.Topic == topic && q.Mode == mode && q.Group == group && q.Instance == instance {
			return q, true
		}
	}
	return QueueStats{}, false
}
