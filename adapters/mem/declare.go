package mem

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluicemq/sluice/ports"
)

var (
	_ ports.GroupDeclarer = (*Adapter)(nil)
	_ ports.TopicDeclarer = (*Adapter)(nil)
)

// DeclareGroup implements ports.GroupDeclarer: it creates the LoadBalance
// queue of group on topic without starting a consumer, so messages sent
// from now on are kept for the group until its first consumer subscribes
// (as a durable queue bound before the publisher starts would). It is
// idempotent. The queue lives as long as the broker. A group mapped by
// [WithExisting] is not created: its queue must exist.
func (c *conn) DeclareGroup(ctx context.Context, topic ports.Topic, group string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	spec := ports.SubscriptionSpec{Topic: topic, Group: group}
	if err := spec.Validate(); err != nil {
		return err
	}
	if c.closed.Load() {
		return ports.ErrClosed
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ports.ErrClosed
	}
	return c.declareGroupLocked(topic, group)
}

// declareGroupLocked creates group's queue on topic, or checks that an
// adopted one exists. b.mu is held.
func (c *conn) declareGroupLocked(topic ports.Topic, group string) error {
	key, adopted := c.queueKey(topic, ports.LoadBalance, group)
	if adopted {
		if c.b.queues[key] == nil {
			return missingQueue(topic, group, key)
		}
		return nil
	}
	c.b.queueLocked(key)
	return nil
}

// DeclareTopic implements ports.TopicDeclarer. The in-process broker keeps
// every property itself: Retention drops a message that waited longer
// unconsumed (checked when a consumer receives, so an expired message
// counts in QueueStats.Ready until then), MaxLength drops a group's oldest
// ready message beyond it, QoS is the class of the topic's messages sent
// with the default class, and Groups are created as DeclareGroup does. A
// topic declared again with the same spec is a no-op; with other
// properties it fails with a *ports.RedeclareError and is left as it is.
//
// A topic mapped by [WithExisting] is adopted, never redeclared: spec
// must match what the existing topic was declared with (nothing, unless
// declared through its own name), and each of its groups that is mapped
// must exist.
func (c *conn) DeclareTopic(ctx context.Context, spec ports.TopicSpec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	if c.closed.Load() {
		return ports.ErrClosed
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return ports.ErrClosed
	}
	phys := c.physical(spec.Topic)
	tk := topicKey{c.ns, phys}
	old, declared := b.specs[tk]
	_, adopted := c.existing[spec.Topic]
	if declared || adopted {
		want := spec
		if adopted {
			// Groups of an adopted topic are checked, not recorded: the
			// existing topology has what it has.
			want.Groups, old.Groups = nil, nil
		}
		if diffs := ports.DiffTopicSpecs(old, want); len(diffs) > 0 {
			name := string(spec.Topic)
			if adopted {
				name = fmt.Sprintf("%s (existing topic %s)", spec.Topic, phys)
			}
			return &ports.RedeclareError{Name: name, Diffs: diffs}
		}
		if !adopted {
			return nil
		}
	}
	for _, g := range spec.Groups {
		if err := c.declareGroupLocked(spec.Topic, g); err != nil {
			return err
		}
	}
	if adopted {
		return nil
	}
	spec.Groups = slices.Clone(spec.Groups)
	b.specs[tk] = spec
	if t := b.topics[tk]; t != nil && spec.MaxLength > 0 {
		for _, q := range *t.queues.Load() {
			q.mu.Lock()
			q.maxLen = spec.MaxLength
			q.mu.Unlock()
		}
	}
	return nil
}

// topicLocked returns the queues of tk, creating the (empty) set when it
// does not exist. b.mu must be held.
func (b *Broker) topicLocked(tk topicKey) *topicQueues {
	t := b.topics[tk]
	if t == nil {
		t = &topicQueues{}
		t.queues.Store(&[]*queue{})
		b.topics[tk] = t
	}
	return t
}

// queueLocked returns the queue named key, creating and binding it to its
// topic when it does not exist (created is then true). b.mu must be held;
// to bind a queue that replays the topic's history, hold the topic's mu
// too.
func (b *Broker) queueLocked(key queueKey) (q *queue, created bool) {
	if q := b.queues[key]; q != nil {
		return q, false
	}
	tk := topicKey{key.ns, key.topic}
	q = &queue{key: key, maxLen: b.specs[tk].MaxLength}
	b.queues[key] = q
	t := b.topicLocked(tk)
	old := *t.queues.Load()
	qs := make([]*queue, len(old), len(old)+1)
	copy(qs, old)
	qs = append(qs, q)
	t.queues.Store(&qs)
	return q, true
}
