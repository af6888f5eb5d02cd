package amqp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// SendBatch publishes msgs on one confirm channel, in order, and waits
// for every confirm. Publishes are mandatory unless
// Options.DropUnroutable (dead letters always are): a message no queue is
// bound for fails with ports.ErrNoSubscriber. A Delay goes through a delay
// queue; a BestEffort message is transient.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	items := make([]item, len(msgs))
	for i := range msgs {
		m, it := &msgs[i], &items[i]
		exch, key := c.topo.target(m.Topic)
		*it = item{exch: exch, key: key, pub: encode(m.Headers, m.Payload), mandatory: !c.opts.DropUnroutable}
		if m.QoS == ports.BestEffort {
			it.pub.DeliveryMode = amqp.Transient
		}
		if dl := m.Headers[ports.HeaderDeadLetterTopic]; dl != "" && m.Topic == ports.DeadLetterTopic(ports.Topic(dl)) {
			it.mandatory = true
		}
		if c.opts.testHook != nil {
			c.opts.testHook(m, it)
		}
		if _, adopted := c.opts.Existing.topic(m.Topic); adopted && m.Delay > 0 {
			it.err = fmt.Errorf("%w: amqp: topic %q is adopted (Options.Existing): a delayed message would come back through the namespace exchange %q, which does not reach the adopted exchange; send it without Delay", ports.ErrUnsupported, string(m.Topic), c.topo.topics)
		} else if m.Delay > 0 {
			c.pub.delayed(it, m.Delay)
		}
	}
	errs := c.pub.publishAll(ctx, items)
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		return errs
	}
	return nil
}

// item is one message to publish with a confirm.
type item struct {
	exch, key string
	pub       amqp.Publishing
	mandatory bool
	delay     int64 // the delay queue (ms) it goes through; 0: none
	err       error // refused before publishing
}

// publisher spreads confirmed publishes over Options.PublishChannels
// confirm channels; one call's items go to one channel, in order.
type publisher struct {
	conn   *connector
	topo   *topology
	max    int
	slots  []pubSlot
	rr     atomic.Uint32
	wg     sync.WaitGroup // confirm listeners
	declMu sync.Mutex     // serialises delay queue declarations
}

type pubSlot struct {
	mu  sync.Mutex
	cur *confirmChannel
}

// publishAll publishes items and waits until each is confirmed or ctx is
// done; errs[i] is nil when item i was confirmed.
func (p *publisher) publishAll(ctx context.Context, items []item) []error {
	o := &outcome{errs: make([]error, len(items)), left: len(items), done: make(chan struct{})}
	for i := range o.errs {
		o.errs[i] = errPending
	}
	if len(items) == 0 {
		close(o.done)
	}
	s := &p.slots[int(p.rr.Add(1))%len(p.slots)]
	var cc *confirmChannel
	err := ctx.Err() // publish nothing for a caller that gave up
	for i := range items {
		ierr := firstOf(err, items[i].err)
		if ierr == nil && items[i].delay > 0 {
			ierr = p.ensureBucket(ctx, items[i].delay)
		}
		if ierr == nil && cc == nil {
			cc, err = p.channel(ctx, s)
			ierr = err
		}
		if ierr == nil {
			if ierr = cc.publish(ctx, o, i, &items[i]); ierr != nil && cc.isDead() {
				err = ierr
			}
		}
		if ierr != nil {
			o.resolve(i, ierr)
		}
	}
	errs := o.wait(ctx)
	for i, e := range errs {
		if items[i].delay > 0 && errors.Is(e, ports.ErrNoSubscriber) {
			p.topo.forgetBucket(items[i].delay) // it expired: declare it again
		}
	}
	return errs
}

// channel returns the slot's confirm channel, opening one when there is
// none or it was lost.
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
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	c := &confirmChannel{ch: ch, sem: make(chan struct{}, p.max), next: 1, done: make(chan struct{})}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, p.max+1))
	// Unbuffered: amqp091 hands over a basic.return before the confirm of
	// the same message, so a returned message is never seen confirmed.
	returns := ch.NotifyReturn(make(chan amqp.Return))
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		c.listen(confirms, returns, closed)
	}()
	s.cur = c
	return c, nil
}

// ensureBucket declares the delay queue ms unless it was declared lately.
func (p *publisher) ensureBucket(ctx context.Context, ms int64) error {
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
	return p.topo.declareBucket(ch, ms, now)
}

// delayed routes it through the delay queue for d (> 0).
func (p *publisher) delayed(it *item, d time.Duration) {
	it.delay = p.topo.bucket(d)
	it.pub.Headers[headerDelay] = strconv.FormatInt(it.delay, 10)
	it.exch, it.mandatory = p.topo.delayEx, true // the delay queue must exist
}

// close closes the confirm channels (failing what is outstanding) and
// waits for their listeners.
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

// unconfirmed says why the broker did not confirm a publish: it matches
// ports.ErrUnconfirmed and, for a returned message, ports.ErrNoSubscriber.
type unconfirmed struct {
	reason     string
	unroutable bool
}

func (e *unconfirmed) Error() string { return "publish not confirmed by the broker: " + e.reason }

func (e *unconfirmed) Is(target error) bool {
	return target == ports.ErrUnconfirmed || e.unroutable && target == ports.ErrNoSubscriber
}

// outcome collects the confirms of one publishAll.
type outcome struct {
	mu   sync.Mutex
	errs []error // errPending until resolved
	left int
	done chan struct{}
}

var errPending = errors.New("pending")

// resolve records the result of publish i; only the first counts.
func (o *outcome) resolve(i int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.errs[i] == errPending {
		o.errs[i] = err
		if o.left--; o.left == 0 {
			close(o.done)
		}
	}
}

// confirmGrace is how long wait still collects the confirms of publishes
// written before ctx was done.
const confirmGrace = 2 * time.Second

// wait blocks until every publish is resolved or ctx is done (plus
// confirmGrace). A publish still in doubt then fails with an error
// wrapping ports.ErrUnconfirmed and ctx.Err(): it may have been stored.
func (o *outcome) wait(ctx context.Context) []error {
	select {
	case <-o.done:
	case <-ctx.Done():
		t := time.NewTimer(confirmGrace)
		select {
		case <-o.done:
		case <-t.C:
		}
		t.Stop()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]error, len(o.errs))
	for i, err := range o.errs {
		if out[i] = err; err == errPending {
			out[i] = fmt.Errorf("%w: %w before the broker's confirm arrived (the message may have been stored)", ports.ErrUnconfirmed, ctx.Err())
		}
	}
	return out
}

// pend is one publish awaiting its confirm.
type pend struct {
	tag           uint64
	o             *outcome
	i             int
	exch, key, id string
	returned      string // the broker's reply text when it returned the message
}

// confirmChannel is the confirm ledger of one channel in confirm mode:
// each publish is registered under its delivery tag before it is written,
// and resolved by one listener reading returns and confirms in wire
// order. A lost channel fails everything outstanding as unconfirmed.
type confirmChannel struct {
	ch    *amqp.Channel
	sem   chan struct{} // bounds the outstanding publishes
	pubMu sync.Mutex    // serialises tag assignment and the write
	next  uint64        // the tag of the next publish
	mu    sync.Mutex
	q     []pend // outstanding, ascending tags, from hd
	hd    int
	dead  error
	done  chan struct{} // closed when the listener exited
}

func (c *confirmChannel) listen(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, closed <-chan *amqp.Error) {
	defer close(c.done)
	for {
		select {
		case r, ok := <-returns:
			if ok {
				c.returned(r)
			} else {
				returns = nil
			}
		case cf, ok := <-confirms:
			if ok {
				c.confirm(cf)
				continue
			}
			reason := "channel closed"
			if e, _ := recvNow(closed); e != nil {
				reason = e.Error()
			}
			c.failAll(&unconfirmed{reason: reason})
			return
		}
	}
}

// returned marks the oldest outstanding publish that matches r.
func (c *confirmChannel) returned(r amqp.Return) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := c.hd; i < len(c.q); i++ {
		if p := &c.q[i]; p.returned == "" && p.exch == r.Exchange && p.key == r.RoutingKey && p.id == r.MessageId {
			p.returned = r.ReplyText + " (returned)"
			return
		}
	}
}

// confirm resolves the publishes up to cf's tag (amqp091 hands multiple
// confirms over one tag at a time, in order).
func (c *confirmChannel) confirm(cf amqp.Confirmation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ; c.hd < len(c.q) && c.q[c.hd].tag <= cf.DeliveryTag; c.hd++ {
		p := &c.q[c.hd]
		var err error
		if p.returned != "" {
			err = &unconfirmed{reason: p.returned, unroutable: true}
		} else if !cf.Ack {
			err = &unconfirmed{reason: "nack"}
		}
		p.o.resolve(p.i, err)
		<-c.sem
		*p = pend{}
	}
	if c.hd == len(c.q) {
		c.q, c.hd = c.q[:0], 0
	} else if c.hd > 1024 && c.hd > len(c.q)/2 {
		n := copy(c.q, c.q[c.hd:])
		clear(c.q[n:])
		c.q, c.hd = c.q[:n], 0
	}
}

// failAll resolves every outstanding publish with err; the channel is dead.
func (c *confirmChannel) failAll(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = err
	for _, p := range c.q[c.hd:] {
		p.o.resolve(p.i, err)
		<-c.sem
	}
	c.q, c.hd = nil, 0
}

func (c *confirmChannel) isDead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// publish writes one message registered under (o, i), nothing once ctx is
// done. nil: the listener resolves it; an error: it was not published.
func (c *confirmChannel) publish(ctx context.Context, o *outcome, i int, it *item) error {
	if err := ctx.Err(); err != nil { // amqp091 writes whatever ctx says
		return err
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
	}
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.mu.Lock()
	if c.dead != nil || c.isDead() {
		err := firstOf[error](c.dead, &unconfirmed{reason: "channel closed"})
		c.mu.Unlock()
		return err
	}
	tag := c.next
	c.q = append(c.q, pend{tag: tag, o: o, i: i, exch: it.exch, key: it.key, id: it.pub.MessageId})
	c.mu.Unlock()
	if err := c.ch.PublishWithContext(ctx, it.exch, it.key, it.mandatory, false, it.pub); err != nil {
		c.mu.Lock()
		owned := len(c.q) > c.hd && c.q[len(c.q)-1].tag == tag
		if owned {
			c.q = c.q[:len(c.q)-1]
			<-c.sem
		}
		c.mu.Unlock()
		if !owned { // the listener failed it with the channel's error
			return nil
		}
		return &unconfirmed{reason: "publish: " + err.Error()}
	}
	c.next++
	return nil
}
