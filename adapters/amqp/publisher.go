package amqp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// item is one message to publish with a confirm.
type item struct {
	exch, key string
	pub       amqp.Publishing
	mandatory bool  // an unroutable message is returned and reported unconfirmed
	delay     int64 // delay queue (ms) the message goes through; 0: none
	err       error // refused before publishing
}

// publisher spreads confirmed publishes over a few confirm channels on the
// publish connection. Each call's items go to one channel, in order.
type publisher struct {
	conn *connector
	topo *topology
	max  int

	slots []pubSlot
	rr    atomic.Uint32
	wg    sync.WaitGroup // confirm listeners

	declMu sync.Mutex // serialises delay queue declarations
}

type pubSlot struct {
	mu  sync.Mutex
	cur *confirmChannel
}

func newPublisher(conn *connector, topo *topology, o Options) *publisher {
	return &publisher{conn: conn, topo: topo, max: o.MaxOutstanding, slots: make([]pubSlot, o.PublishChannels)}
}

// channel returns the slot's confirm channel, opening a new one (on a new
// connection if needed) when there is none or it was lost.
func (p *publisher) channel(ctx context.Context, s *pubSlot) (*confirmChannel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && !s.cur.isDead() {
		return s.cur, nil
	}
	ch, err := p.conn.channel(ctx)
	if err != nil {
		return nil, err
	}
	cc, err := openConfirmChannel(ch, p.max, &p.wg)
	if err != nil {
		return nil, err
	}
	s.cur = cc
	return cc, nil
}

// publishAll publishes items with confirms and waits until every one is
// confirmed or ctx is done. errs[i] is nil when item i was confirmed.
func (p *publisher) publishAll(ctx context.Context, items []item) []error {
	o := newOutcome(len(items))
	if err := ctx.Err(); err != nil { // publish nothing for a caller that gave up
		for i := range items {
			o.resolve(i, err)
		}
		return o.wait(ctx)
	}
	skip := make([]bool, len(items))
	for i := range items {
		err := items[i].err
		if err == nil && items[i].delay > 0 {
			err = p.ensureBucket(ctx, items[i].delay)
		}
		if err != nil {
			o.resolve(i, err)
			skip[i] = true
		}
	}
	s := &p.slots[int(p.rr.Add(1))%len(p.slots)]
	cc, err := p.channel(ctx, s)
	for i := range items {
		if skip[i] {
			continue
		}
		if err != nil {
			o.resolve(i, err)
			continue
		}
		it := &items[i]
		if perr := cc.publish(ctx, o, i, it); perr != nil {
			o.resolve(i, perr)
			if cc.isDead() {
				err = perr
			}
		}
	}
	errs := o.wait(ctx)
	for i, e := range errs {
		if items[i].delay > 0 && errors.Is(e, ports.ErrNoSubscriber) {
			p.topo.forgetBucket(items[i].delay) // it expired: declare it again next time
		}
	}
	return errs
}

// ensureBucket declares the delay queue ms unless it was declared
// recently.
func (p *publisher) ensureBucket(ctx context.Context, ms int64) error {
	if !p.topo.needBucket(ms, time.Now()) {
		return nil
	}
	p.declMu.Lock()
	defer p.declMu.Unlock()
	now := time.Now()
	if !p.topo.needBucket(ms, now) {
		return nil
	}
	ch, err := p.conn.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := p.topo.declareBucket(ch, ms, now); err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	return nil
}

// delayed routes it through the delay queue for d (which must be > 0).
func (p *publisher) delayed(it *item, d time.Duration) {
	ms := p.topo.bucket(d)
	it.delay = ms
	it.pub.Headers[headerDelay] = strconv.FormatInt(ms, 10)
	it.exch = p.topo.delayEx
	it.mandatory = true // the delay queue must exist
}

// close closes the confirm channels (failing what is outstanding) and waits
// for their listeners.
func (p *publisher) close() {
	for i := range p.slots {
		s := &p.slots[i]
		s.mu.Lock()
		if s.cur != nil {
			s.cur.ch.Close()
		}
		s.mu.Unlock()
	}
	p.wg.Wait()
}

// SendBatch publishes msgs (validated and stamped by the portable layer)
// to the namespace's direct exchange under their topic, or to an adopted
// exchange, on one confirm channel, in order, and waits for every confirm.
// Publishes are mandatory: a message no queue is bound for is returned by
// the broker and fails with ports.ErrNoSubscriber, unless
// Options.DropUnroutable (dead-letter copies are always mandatory). A
// message with a Delay goes through a delay queue and is confirmed when it
// is stored there; a BestEffort one is transient.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	items := make([]item, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		exch, key := c.topo.target(m.Topic)
		it := item{exch: exch, key: key, pub: encode(m.Headers, m.Payload), mandatory: !c.opts.DropUnroutable}
		if m.QoS == ports.BestEffort {
			it.pub.DeliveryMode = amqp.Transient
		}
		if dl := m.Headers[ports.HeaderDeadLetterTopic]; dl != "" && m.Topic == ports.DeadLetterTopic(ports.Topic(dl)) {
			it.mandatory = true // a dead letter must reach a queue
			if c.faults.deadLetters.Load() {
				it.key = faultKey
			}
		} else if c.faults.sends.Load() {
			it.key, it.mandatory = faultKey, true
		}
		if m.Delay > 0 {
			if _, ok := c.existing.topic(m.Topic); ok {
				it.err = fmt.Errorf("%w: amqp: topic %q is adopted (Options.Existing): a delayed message would come back through the namespace exchange %q, which does not reach the adopted exchange; send it without Delay", ports.ErrUnsupported, string(m.Topic), c.topo.topics)
			}
			c.pub.delayed(&it, m.Delay)
		}
		items[i] = it
	}
	errs := c.pub.publishAll(ctx, items)
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}
