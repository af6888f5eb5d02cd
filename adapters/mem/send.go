package mem

import (
	"bytes"
	"context"

	"github.com/sluicemq/sluice/ports"
)

// SendBatch stores each message (validated, stamped and size-checked by
// the portable layer) in the queues bound to its topic, or with a Delay in
// the scheduler, routed to the queues bound when it falls due: the confirm
// is synchronous. A topic without a queue (no subscription, no declared
// group) stores nothing and fails the message with ports.ErrNoSubscriber.
// The topic's declared Retention (from when the message is due) and QoS
// (for a message of the default class) apply; a topic mapped by
// [WithExisting] is published to under its existing name. The payload is
// copied; the headers are the portable layer's copy and kept. A message
// fails with ports.ErrUnconfirmed while [Broker.FailSends] is on,
// ports.ErrClosed after Close, or [ErrQueueFull] joined with ctx.Err()
// (see [WithMaxQueue]; the messages before it are stored).
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	var errs []error
	for i := range msgs {
		if err := c.sendOne(ctx, &msgs[i]); err != nil {
			if errs == nil {
				errs = make([]error, len(msgs))
			}
			errs[i] = err
		}
	}
	return errs
}

func (c *conn) sendOne(ctx context.Context, m *ports.Message) error {
	b := c.b
	switch {
	case c.closed.Load() || b.closed.Load():
		return ports.ErrClosed
	case b.failSends.Load():
		return ports.ErrUnconfirmed
	}
	msg := message{topic: c.physical(m.Topic), key: m.Key, payload: bytes.Clone(m.Payload), headers: m.Headers, qos: m.QoS}
	t, spec := b.lookup(c.ns, msg.topic)
	if spec.Retention > 0 {
		msg.expires = b.clock.Now().Add(m.Delay + spec.Retention).UnixNano()
	}
	if m.QoS == ports.AtLeastOnce {
		msg.qos = spec.QoS
	}
	if m.Delay <= 0 {
		return b.send(ctx, t, &msg)
	}
	if t == nil || len(*t.queues.Load()) == 0 {
		return ports.ErrNoSubscriber
	}
	if !b.delay(c.ns, msg, m.Delay) {
		return ports.ErrClosed
	}
	return nil
}
