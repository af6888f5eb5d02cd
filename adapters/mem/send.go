package mem

import (
	"bytes"
	"context"

	"github.com/sluicemq/sluice/ports"
)

// SendBatch stores each message in the queues bound to its topic, or with
// a Delay in the scheduler until it is due: the confirm is synchronous. A
// topic without a queue fails it with ports.ErrNoSubscriber. The topic's
// declared Retention and QoS apply; the payload is copied.
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
	return b.send(ctx, t, &msg, m.Delay)
}
