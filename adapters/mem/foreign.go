package mem

import (
	"bytes"
	"context"

	"github.com/sluicemq/sluice/ports"
)

// SendForeign stores payload on topic as a producer without sluice's
// envelope writes it: with headers as given (nil for none) and nothing
// stamped — no HeaderID, so a message without one is delivered with no
// identity (ports.IDNone), as on a broker that assigns none. It is for
// tests of pipelines that consume other programs' messages; Send is the
// way to publish.
//
// Like Send it fails with ports.ErrNoSubscriber when no queue is bound to
// topic, and with ports.ErrClosed after Close.
func (a *Adapter) SendForeign(ctx context.Context, topic ports.Topic, payload []byte, headers ports.Headers) error {
	if err := topic.Validate(); err != nil {
		return err
	}
	if a.c.closed.Load() || a.c.b.closed.Load() {
		return ports.ErrClosed
	}
	h := headers.Clone()
	if h == nil {
		h = ports.Headers{}
	}
	m := message{topic: a.c.physical(topic), id: h[ports.HeaderID], payload: bytes.Clone(payload), headers: h}
	return a.c.b.send(ctx, a.c.ns, &m)
}
