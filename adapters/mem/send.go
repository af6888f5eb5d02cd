package mem

import (
	"bytes"
	"context"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// SendBatch stores each message (validated, stamped and size-checked by
// the portable layer): the in-process broker confirms synchronously, so a
// nil result means every message is in the queues bound to its topic (or,
// with Message.Delay, in the scheduler, routed to the queues bound when it
// falls due). A topic with no queue yet — no subscription ever made and no
// group declared with DeclareGroup — stores nothing: that message fails
// with ports.ErrNoSubscriber instead of being dropped silently.
//
// A message to a topic declared with a Retention is dropped unconsumed
// once it waited that long after it was due; a best-effort message
// (Message.QoS, or the declared topic's class for a message that leaves
// QoS at its default) is dropped by a queue at its [WithMaxQueue] bound
// instead of making Send wait, and is counted in QueueStats.Dropped. A
// topic mapped by [WithExisting] is published to under its existing name.
//
// The payload is copied; the stamped headers are the portable layer's own
// copy and are kept. A message fails with ports.ErrUnconfirmed while
// [Broker.FailSends] is on, ports.ErrClosed after Close, or [ErrQueueFull]
// joined with ctx.Err() when it waited for room in a full queue until ctx
// was done (see [WithMaxQueue]; nothing of that message is stored, the
// messages before it are).
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	b := c.b
	if c.closed.Load() || b.closed.Load() {
		return failAll(len(msgs), ports.ErrClosed)
	}
	var now time.Time // read only for a retention
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	for i := range msgs {
		m := &msgs[i]
		if b.failSends.Load() {
			fail(i, ports.ErrUnconfirmed)
			continue
		}
		phys := c.physical(m.Topic)
		msg := message{
			topic:   phys,
			key:     m.Key,
			id:      m.Headers[ports.HeaderID],
			payload: bytes.Clone(m.Payload),
			headers: m.Headers,
			qos:     classOf(m.QoS),
		}
		if spec := b.spec(c.ns, phys); spec.Retention > 0 || spec.QoS != ports.AtLeastOnce {
			if spec.Retention > 0 {
				if now.IsZero() {
					now = b.clock.Now()
				}
				msg.expires = now.Add(m.Delay + spec.Retention).UnixNano() // measured from when it is due
			}
			if m.QoS == ports.AtLeastOnce {
				msg.qos = classOf(spec.QoS)
			}
		}
		if m.Delay <= 0 {
			if err := b.send(ctx, c.ns, &msg); err != nil {
				fail(i, err)
			}
			continue
		}
		if !b.bound(c.ns, msg.topic) {
			fail(i, ports.ErrNoSubscriber)
			continue
		}
		if !b.delay(c.ns, msg, m.Delay) {
			fail(i, ports.ErrClosed)
		}
	}
	return errs
}

// failAll fails n messages with err.
func failAll(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
