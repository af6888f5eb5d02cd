package pulsar

import (
	"context"
	"fmt"
	"strings"
	"time"

	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// producer is one topic's producer, created once.
type producer struct {
	ready chan struct{} // closed once p or err is set
	p     pulsarclient.Producer
	err   error
}

// SendBatch publishes each message with SendAsync on its topic's producer
// and waits for every receipt. A message's key is the Pulsar key, its
// headers the properties; a Delay becomes DeliverAfter plus the
// not-before header, which the portable layer checks on receipt (a broker
// with delayedDeliveryDeliverAtTimeStrict=false may dispatch up to a tick
// early). A best-effort message goes to the topic's non-persistent twin.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		errs[i] = err
	}
	receipts := make(chan receipt, len(msgs)) // buffered: a late receipt never blocks the client
	sent, n := 0, 0
	for i := range msgs {
		n += len(msgs[i].Payload)
	}
	// The client keeps a payload until it is sent, which may be after a
	// cancelled call returned: it gets copies, in one allocation.
	bodies := make([]byte, 0, n)
	for i := range msgs {
		m := &msgs[i]
		topic, err := c.physicalTopic(m.Topic)
		if err == nil && c.declared.QoS(m) == ports.BestEffort {
			topic = twin(topic)
		}
		var p pulsarclient.Producer
		if err == nil {
			p, err = c.producer(ctx, topic)
		}
		if err != nil {
			fail(i, err)
			continue
		}
		bodies = append(bodies, m.Payload...)
		pm := &pulsarclient.ProducerMessage{Payload: bodies[len(bodies)-len(m.Payload):], Key: m.Key, Properties: m.Headers.Map(), DeliverAfter: m.Delay}
		if m.Delay > 0 {
			pm.Properties[kit.HeaderNotBefore] = kit.NotBefore(time.Now().Add(m.Delay))
		}
		sent++
		p.SendAsync(ctx, pm, func(_ pulsarclient.MessageID, _ *pulsarclient.ProducerMessage, err error) {
			receipts <- receipt{i, err}
		})
	}
	done := make([]bool, len(msgs)) // which messages got their receipt
	for ; sent > 0; sent-- {
		select {
		case r := <-receipts:
			if r.err != nil {
				fail(r.i, fmt.Errorf("%w: %w", ports.ErrUnconfirmed, r.err))
			}
			done[r.i] = true
		case <-ctx.Done():
			for i := range msgs {
				if !done[i] && (errs == nil || errs[i] == nil) {
					fail(i, ctx.Err())
				}
			}
			return errs
		}
	}
	return errs
}

type receipt struct {
	i   int
	err error
}

// producer returns the producer of topic, creating it once. The client's CreateProducer takes no context, so creation runs in
// a goroutine of the conn and the caller waits for it bounded by ctx. A
// failed creation is not cached.
func (c *conn) producer(ctx context.Context, topic string) (pulsarclient.Producer, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ports.ErrClosed
	}
	p, ok := c.producers[topic]
	if !ok {
		p = &producer{ready: make(chan struct{})}
		c.producers[topic] = p
		c.bg.Go(func() { c.create(topic, p) })
	}
	c.mu.Unlock()
	select {
	case <-p.ready:
		return p.p, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// create makes the producer p of topic and marks it ready. Batching is
// off, so that each message is an entry of its own that can be acked and
// nacked alone (chunking requires it too).
func (c *conn) create(topic string, p *producer) {
	prod, err := c.client.CreateProducer(pulsarclient.ProducerOptions{
		Topic: topic, SendTimeout: c.o.SendTimeout, DisableBatching: true, EnableChunking: c.o.Chunking,
	})
	c.mu.Lock()
	switch {
	case err != nil:
		// %v: the client's error can wrap its own context's deadline,
		// which is not the caller's.
		p.err = fmt.Errorf("%w: create producer for %s: %v", ports.ErrUnconfirmed, topic, err)
		if c.producers[topic] == p {
			delete(c.producers, topic)
		}
	case c.closed:
		prod.Close()
		p.err = ports.ErrClosed
	default:
		p.p = prod
	}
	c.mu.Unlock()
	close(p.ready)
}

// twin is the non-persistent topic of persistent topic name: best-effort
// messages travel there.
func twin(name string) string {
	if rest, ok := strings.CutPrefix(name, "persistent://"); ok {
		return "non-persistent://" + rest
	}
	return name
}
