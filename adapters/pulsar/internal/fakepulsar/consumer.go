package fakepulsar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
)

// ErrConsumerClosed is returned by operations on a closed consumer.
var ErrConsumerClosed = errors.New("fakepulsar: consumer closed")

const defaultNackDelay = time.Minute // the client's default NackRedeliveryDelay

// consumer models a client consumer: a receiver queue the broker fills
// (capacity = ReceiverQueueSize) and a pump that hands the queue out
// through an unbuffered channel, returning a permit per message taken.
type consumer struct {
	b      *Broker
	s      *subscription
	opts   pulsar.ConsumerOptions
	client *client

	capacity int
	queue    []*message // guarded by b.mu
	closed   bool       // guarded by b.mu
	timers   map[*timer]struct{}

	out      chan pulsar.ConsumerMessage
	wake     chan struct{}
	closing  chan struct{}
	pumpDone chan struct{}
}

func (c *consumer) enqueue(m *message) {
	c.queue = append(c.queue, m)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// dropQueued removes entry i from the queue (it is being redelivered).
func (c *consumer) dropQueued(i int) {
	for n, m := range c.queue {
		if m.e.id.entry == i {
			c.queue = append(c.queue[:n], c.queue[n+1:]...)
			return
		}
	}
}

// pump hands queued messages to the application one at a time.
func (c *consumer) pump() {
	defer close(c.pumpDone)
	for {
		c.b.mu.Lock()
		var head *message
		if !c.closed && len(c.queue) > 0 {
			head = c.queue[0]
		}
		c.b.mu.Unlock()
		if head == nil {
			select {
			case <-c.wake:
				continue
			case <-c.closing:
				return
			}
		}
		select {
		case c.out <- pulsar.ConsumerMessage{Consumer: c, Message: head}:
			c.b.mu.Lock()
			if !c.closed && len(c.queue) > 0 && c.queue[0] == head {
				c.queue = c.queue[1:]
				c.b.dispatchLocked(c.s) // the taken message returned a permit
			}
			c.b.mu.Unlock()
		case <-c.wake:
		case <-c.closing:
			return
		}
	}
}

func (c *consumer) Subscription() string { return c.s.name }
func (c *consumer) Name() string         { return c.opts.Name }

func (c *consumer) Chan() <-chan pulsar.ConsumerMessage { return c.out }

func (c *consumer) Receive(ctx context.Context) (pulsar.Message, error) {
	select {
	case cm := <-c.out:
		return cm.Message, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closing:
		return nil, ErrConsumerClosed
	}
}

func (c *consumer) Ack(m pulsar.Message) error             { return c.ackIDs([]pulsar.MessageID{m.ID()}) }
func (c *consumer) AckID(id pulsar.MessageID) error        { return c.ackIDs([]pulsar.MessageID{id}) }
func (c *consumer) AckIDList(ids []pulsar.MessageID) error { return c.ackIDs(ids) }

// ackIDs acknowledges all of ids or, on a closed consumer, an invalid id or
// an injected fault, none of them.
func (c *consumer) ackIDs(ids []pulsar.MessageID) error {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	if c.closed {
		return ErrConsumerClosed
	}
	entries := make([]int, len(ids))
	for n, id := range ids {
		mid, ok := id.(*messageID)
		if !ok || mid.topic != c.s.t.name || mid.entry >= len(c.s.t.entries) {
			return fmt.Errorf("fakepulsar: invalid message id %v for %s", id, c.s.t.name)
		}
		entries[n] = mid.entry
	}
	if c.b.ackFault != nil {
		if err := c.b.ackFault(c.s.t.name, c.s.name); err != nil {
			for _, i := range entries {
				c.b.record(Event{Op: OpAck, Topic: c.s.t.name, Subscription: c.s.name, ID: c.s.t.entries[i].props["ce-id"], Entry: i, Batch: len(ids), Err: err})
			}
			return err
		}
	}
	for _, i := range entries {
		c.s.acked[i] = true
		delete(c.s.pending, i)
		delete(c.s.counts, i)
		c.b.record(Event{Op: OpAck, Topic: c.s.t.name, Subscription: c.s.name, ID: c.s.t.entries[i].props["ce-id"], Entry: i, Batch: len(ids)})
	}
	return nil
}

func (c *consumer) Nack(m pulsar.Message) {
	delay := c.nackDelay()
	if c.opts.NackBackoffPolicy != nil {
		delay = c.opts.NackBackoffPolicy.Next(m.RedeliveryCount())
	}
	c.nack(m.ID(), delay)
}

func (c *consumer) NackID(id pulsar.MessageID) { c.nack(id, c.nackDelay()) }

func (c *consumer) nackDelay() time.Duration {
	if c.opts.NackRedeliveryDelay > 0 {
		return c.opts.NackRedeliveryDelay
	}
	return defaultNackDelay
}

func (c *consumer) nack(id pulsar.MessageID, delay time.Duration) {
	c.b.mu.Lock()
	defer c.b.mu.Unlock()
	mid, ok := id.(*messageID)
	if !ok || mid.topic != c.s.t.name || c.closed {
		return // the client logs and ignores these
	}
	i := mid.entry
	c.b.record(Event{Op: OpNack, Topic: c.s.t.name, Subscription: c.s.name, ID: c.s.t.entries[i].props["ce-id"], Entry: i, Delay: delay})
	c.b.afterLocked(delay, c, func() { c.b.redeliverLocked(c.s, c, i) })
}

// Close detaches the consumer: its unacknowledged messages go back to the
// subscription. It acknowledges nothing.
func (c *consumer) Close() {
	c.b.mu.Lock()
	if c.closed {
		c.b.mu.Unlock()
		return
	}
	c.closed = true
	c.queue = nil
	for h := range c.timers {
		c.b.cancelLocked(h)
	}
	close(c.closing)
	c.b.removeLocked(c.s, c)
	c.b.record(Event{Op: OpClose, Topic: c.s.t.name, Subscription: c.s.name})
	c.b.mu.Unlock()
	<-c.pumpDone
	c.client.forget(c)
}

func (c *consumer) Unsubscribe() error {
	c.b.mu.Lock()
	if c.closed {
		c.b.mu.Unlock()
		return ErrConsumerClosed
	}
	if len(c.s.consumers) > 1 {
		c.b.mu.Unlock()
		return fmt.Errorf("fakepulsar: unsubscribe %s: other consumers are connected", c.s.name)
	}
	delete(c.s.t.subs, c.s.name)
	c.b.record(Event{Op: OpUnsub, Topic: c.s.t.name, Subscription: c.s.name})
	c.b.mu.Unlock()
	c.Close()
	return nil
}

func (c *consumer) UnsubscribeForce() error { return c.Unsubscribe() }

// Not modelled.

func (c *consumer) GetLastMessageIDs() ([]pulsar.TopicMessageID, error) {
	return nil, errUnsupported("GetLastMessageIDs")
}
func (c *consumer) AckWithTxn(pulsar.Message, pulsar.Transaction) error {
	return errUnsupported("AckWithTxn")
}
func (c *consumer) AckCumulative(pulsar.Message) error           { return errUnsupported("AckCumulative") }
func (c *consumer) AckIDCumulative(pulsar.MessageID) error       { return errUnsupported("AckIDCumulative") }
func (c *consumer) ReconsumeLater(pulsar.Message, time.Duration) {}
func (c *consumer) ReconsumeLaterWithCustomProperties(pulsar.Message, map[string]string, time.Duration) {
}
func (c *consumer) Seek(pulsar.MessageID) error { return errUnsupported("Seek") }
func (c *consumer) SeekByTime(time.Time) error  { return errUnsupported("SeekByTime") }

var _ pulsar.Consumer = (*consumer)(nil)
