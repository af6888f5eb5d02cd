package mem

import (
	"cmp"
	"slices"

	"github.com/sluicemq/sluice/ports"
)

// Stats is a snapshot of a broker's queues and scheduler.
type Stats struct {
	Queues          []QueueStats // sorted by namespace, topic, mode, group, instance
	DelayedMessages int          // sent with a Delay, not due yet
	Scheduled       int          // scheduler entries: delays, delayed requeues, expiries
}

// QueueStats describes one queue.
type QueueStats struct {
	Namespace    string
	Topic        ports.Topic
	Mode         ports.Mode
	Group        string
	Instance     string // Broadcast only
	KeyFilter    string
	Consumers    int // running subscriptions
	Waiting      int // consumers blocked in Receive that may take messages
	Ready        int // messages waiting to be received
	InFlight     int // deliveries received and not settled
	Delayed      int // requeued messages waiting for their delay
	MaxReady     int // the bound on Ready (WithMaxQueue; 0: unbounded)
	Dropped      int // unconsumed: retention, MaxLength, best effort
	SingleActive bool
}

// Stats returns a snapshot, consistent per queue, not across queues.
func (b *Broker) Stats() Stats {
	b.mu.RLock()
	st := Stats{Scheduled: b.sched.Len(), DelayedMessages: int(b.delayedMsgs.Load())}
	for _, q := range b.queues {
		q.mu.Lock()
		k := q.key
		st.Queues = append(st.Queues, QueueStats{
			Namespace: k.ns, Topic: k.topic, Mode: k.mode, Group: k.group, Instance: k.instance,
			KeyFilter: q.filter, Consumers: q.consumers, Waiting: q.receivers, Ready: q.ready.Len(),
			InFlight: q.inFlight, Delayed: q.delayed, MaxReady: q.max, Dropped: q.dropped, SingleActive: q.single,
		})
		q.mu.Unlock()
	}
	b.mu.RUnlock()
	slices.SortFunc(st.Queues, func(x, y QueueStats) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Topic, y.Topic),
			cmp.Compare(x.Mode, y.Mode), cmp.Compare(x.Group, y.Group), cmp.Compare(x.Instance, y.Instance))
	})
	return st
}

// Queue returns the stats of the LoadBalance queue of (ns, topic, group),
// or of the Broadcast queue when instance is not empty.
func (s Stats) Queue(ns string, topic ports.Topic, group, instance string) (QueueStats, bool) {
	mode := ports.LoadBalance
	if instance != "" {
		mode = ports.Broadcast
	}
	i := slices.IndexFunc(s.Queues, func(q QueueStats) bool {
		return q.Namespace == ns && q.Topic == topic && q.Mode == mode && q.Group == group && q.Instance == instance
	})
	if i < 0 {
		return QueueStats{}, false
	}
	return s.Queues[i], true
}
