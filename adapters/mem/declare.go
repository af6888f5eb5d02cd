package mem

import (
	"context"

	"github.com/sluicemq/sluice/ports"
)

// DeclareGroup implements ports.GroupDeclarer: it creates the LoadBalance
// queue of group on topic without starting a consumer, so messages sent
// from now on are kept for the group until its first consumer subscribes
// (as a durable queue bound before the publisher starts would). It is
// idempotent. The queue lives as long as the broker.
func (a *Adapter) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	if err := spec.Validate(); err != nil {
		return err
	}
	if a.closed.Load() {
		return ports.ErrClosed
	}
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ports.ErrClosed
	}
	b.queueLocked(queueKey{ns: a.ns, topic: topic, mode: ports.LoadBalance, group: group})
	return nil
}

// queueLocked returns the queue named key, creating and binding it to its
// topic when it does not exist. b.mu must be held.
func (b *Broker) queueLocked(key queueKey) *queue {
	if q := b.queues[key]; q != nil {
		return q
	}
	q := &queue{key: key}
	b.queues[key] = q
	tk := topicKey{key.ns, key.topic}
	t := b.topics[tk]
	if t == nil {
		t = &topicQueues{}
		t.queues.Store(&[]*queue{})
		b.topics[tk] = t
	}
	old := *t.queues.Load()
	qs := make([]*queue, len(old), len(old)+1)
	copy(qs, old)
	qs = append(qs, q)
	t.queues.Store(&qs)
	return q
}
