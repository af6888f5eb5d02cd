package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/ports"
)

// unconfirmed says why the broker did not confirm a publish: it matches
// ports.ErrUnconfirmed and, for a message the broker returned because no
// queue was bound for it (mandatory publish, basic.return), also
// ports.ErrNoSubscriber.
type unconfirmed struct {
	reason     string // the broker's reply text, "nack", or the channel's error
	unroutable bool
}

func (e *unconfirmed) Error() string { return "publish not confirmed by the broker: " + e.reason }

func (e *unconfirmed) Is(target error) bool {
	return target == ports.ErrUnconfirmed || e.unroutable && target == ports.ErrNoSubscriber
}

// outcome collects the confirms of one group of publishes (one Send call,
// or the copies made by one Settle).
type outcome struct {
	mu   sync.Mutex
	errs []error // errPending until resolved
	left int
	done chan struct{}
}

var errPending = errors.New("pending")

func newOutcome(n int) *outcome {
	o := &outcome{errs: make([]error, n), left: n, done: make(chan struct{})}
	for i := range o.errs {
		o.errs[i] = errPending
	}
	if n == 0 {
		close(o.done)
	}
	return o
}

// resolve records the result of publish i (nil: confirmed). Only the first
// resolution of an index counts.
func (o *outcome) resolve(i int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.errs[i] != errPending {
		return
	}
	o.errs[i] = err
	o.left--
	if o.left == 0 {
		close(o.done)
	}
}

// confirmGrace is how long wait keeps collecting the confirms of
// publishes already written after ctx is done: a confirm that arrives
// then is reported as the confirm it is, not as a failure.
const confirmGrace = 2 * time.Second

// wait blocks until every publish is resolved or ctx is done, and returns
// the per-index errors. Past ctx, publishes already written get up to
// confirmGrace for their confirms; one still unconfirmed then fails with
// an error wrapping both ports.ErrUnconfirmed and ctx.Err() (it may have
// been stored). A publish never written failed with ctx.Err() when it was
// skipped.
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
		if err == errPending {
			err = fmt.Errorf("%w: %w before the broker's confirm arrived (the message may have been stored)", ports.ErrUnconfirmed, ctx.Err())
		}
		out[i] = err
	}
	return out
}

// pend is one publish awaiting its confirm.
type pend struct {
	tag       uint64
	o         *outcome
	i         int
	exch, key string
	id        string
	returned  string // the broker's reply text when it returned the message
}

// confirmChannel is one channel in confirm mode with any number of
// outstanding publishes (bounded by sem). Publishes are registered under
// their delivery tag before they are written, so a confirm can never
// arrive for an unknown tag; one listener goroutine reads returns and
// confirms in wire order (a basic.return always precedes the confirm of
// the same message), so an unroutable message is never reported confirmed.
type confirmChannel struct {
	ch  *amqp.Channel
	sem chan struct{}

	pubMu sync.Mutex // serialises tag assignment and the write
	next  uint64     // the tag of the next publish

	mu   sync.Mutex
	q    []pend // outstanding, ascending tags, from hd
	hd   int
	dead error
	done chan struct{} // closed when the listener exited
}

// openConfirmChannel puts ch in confirm mode and starts its listener,
// counted in wg.
func openConfirmChannel(ch *amqp.Channel, maxOutstanding int, wg *sync.WaitGroup) (*confirmChannel, error) {
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	c := &confirmChannel{
		ch:   ch,
		sem:  make(chan struct{}, maxOutstanding),
		next: 1,
		done: make(chan struct{}),
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, maxOutstanding+1))
	returns := ch.NotifyReturn(make(chan amqp.Return))
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.listen(confirms, returns, closed)
	}()
	return c, nil
}

func (c *confirmChannel) listen(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, closed <-chan *amqp.Error) {
	defer close(c.done)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			c.returned(r)
		case cf, ok := <-confirms:
			if !ok {
				reason := "channel closed"
				select {
				case e := <-closed:
					if e != nil {
						reason = e.Error()
					}
				default:
				}
				c.failAll(&unconfirmed{reason: reason})
				return
			}
			c.confirm(cf)
		}
	}
}

// returned marks the oldest outstanding publish that matches r.
func (c *confirmChannel) returned(r amqp.Return) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := c.hd; i < len(c.q); i++ {
		p := &c.q[i]
		if p.returned == "" && p.exch == r.Exchange && p.key == r.RoutingKey && p.id == r.MessageId {
			p.returned = r.ReplyText
			if p.returned == "" {
				p.returned = "returned"
			}
			return
		}
	}
}

// confirm resolves the publishes up to cf's tag (amqp091 hands multiple
// confirms over one tag at a time, in order). Lock order: c.mu, then the
// outcome's.
func (c *confirmChannel) confirm(cf amqp.Confirmation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.hd < len(c.q) && c.q[c.hd].tag <= cf.DeliveryTag {
		p := &c.q[c.hd]
		var err error
		switch {
		case p.returned != "":
			err = &unconfirmed{reason: p.returned, unroutable: true}
		case !cf.Ack:
			err = &unconfirmed{reason: "nack"}
		}
		p.o.resolve(p.i, err)
		<-c.sem
		*p = pend{}
		c.hd++
	}
	c.compact()
}

func (c *confirmChannel) compact() {
	if c.hd == len(c.q) {
		c.q, c.hd = c.q[:0], 0
		return
	}
	if c.hd > 1024 && c.hd > len(c.q)/2 {
		n := copy(c.q, c.q[c.hd:])
		clear(c.q[n:])
		c.q, c.hd = c.q[:n], 0
	}
}

// failAll resolves every outstanding publish with err and marks the
// channel dead.
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

// isDead reports whether the channel was lost.
func (c *confirmChannel) isDead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// publish writes one message and registers it under (o, i); it writes
// nothing once ctx is done (the error is then ctx.Err()). A nil return
// means o will be resolved for i by the listener; an error means the
// message was not published and the caller resolves it.
func (c *confirmChannel) publish(ctx context.Context, o *outcome, i int, it *item) error {
	// amqp091 writes whatever it is given, whatever ctx says: a caller
	// that gave up must not go on publishing the rest of its Send.
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.deadErr()
	}
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	c.mu.Lock()
	if c.dead != nil {
		err := c.dead
		c.mu.Unlock()
		<-c.sem
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
		}
		c.mu.Unlock()
		if !owned { // the listener failed it with the channel's error
			return nil
		}
		<-c.sem
		return &unconfirmed{reason: "publish: " + err.Error()}
	}
	c.next++
	return nil
}

func (c *confirmChannel) deadErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead != nil {
		return c.dead
	}
	return &unconfirmed{reason: "channel closed"}
}
