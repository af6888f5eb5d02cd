package amqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// SendBatch publishes msgs, mandatory unless Options.DropUnroutable, and
// waits for their confirms. A Delay goes through a delay queue; a
// BestEffort message is transient.
func (c *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	return c.publish(ctx, len(msgs), func(i int) (it item) {
		m := &msgs[i]
		exch, key := c.topo.target(m.Topic)
		dl := m.Headers.Get(ports.HeaderDeadLetterTopic)
		it = item{exch: exch, key: key, pub: encode(m.Headers, m.Payload), mandatory: !c.opts.DropUnroutable || dl != "" && m.Topic == ports.DeadLetterTopic(ports.Topic(dl))}
		if m.QoS == ports.BestEffort {
			it.pub.DeliveryMode = amqp.Transient
		}
		if _, adopted := c.opts.Existing.Topics[m.Topic]; adopted && m.Delay > 0 {
			it.err = fmt.Errorf("%w: amqp: topic %q is adopted (Options.Existing): a delayed message would come back through the namespace exchange %q, which does not reach the adopted exchange; send it without Delay", ports.ErrUnsupported, string(m.Topic), c.topo.topics)
		} else if m.Delay > 0 { // through the delay queue of its step, which must exist
			it.delay = c.topo.bucket(m.Delay)
			if it.pub.Headers == nil {
				it.pub.Headers = amqp.Table{}
			}
			it.pub.Headers[headerDelay] = strconv.FormatInt(it.delay, 10)
			it.exch, it.mandatory = c.topo.delayEx, true
		}
		if c.opts.testHook != nil {
			return c.opts.testHook(m, it)
		}
		return it
	})
}

// item is one message to publish with a confirm.
type item struct {
	exch, key string
	pub       amqp.Publishing
	mandatory bool
	delay     int64 // the delay queue (ms) it goes through; 0: none
	err       error // refused before publishing
}

// confirmChannel is a channel in confirm mode and the ledger of its
// publishes, resolved by one listener reading returns and confirms.
type confirmChannel struct {
	ch *amqp.Channel
	*kit.ConfirmLedger[pend]
}

// pend is what the listener matches a basic.return against.
type pend struct {
	exch, key, id string
	returned      string // the broker's reply text when it returned the message
}

// confirmGrace is how long a publish collects confirms after ctx is done.
const confirmGrace = 2 * time.Second

// publish publishes n items, each made by next as it goes out, in order on
// the confirm channel, and waits for their confirms (or ctx): each error.
func (c *conn) publish(ctx context.Context, n int, next func(i int) item) []error {
	res := kit.NewConfirms(n)
	var cc *confirmChannel
	var delayed [][2]int64 // index and delay queue of each delayed item
	err := ctx.Err()       // publish nothing for a caller that gave up
	for i := range n {
		it := next(i)
		ierr := cmp.Or(err, it.err)
		if ierr == nil && it.delay > 0 {
			delayed = append(delayed, [2]int64{int64(i), it.delay})
			ierr = c.topo.buckets.Ensure(it.delay, func() error {
				return c.pubC.with(ctx, func(ch *amqp.Channel) error { return c.topo.declareBucket(ch, it.delay) })
			})
		}
		if ierr == nil && cc == nil {
			cc, err = c.confirm.Get(ctx)
			ierr = err
		}
		if ierr == nil {
			ierr = cc.Publish(ctx, res, i, pend{exch: it.exch, key: it.key, id: it.pub.MessageId}, func() error {
				if err := cc.ch.PublishWithContext(ctx, it.exch, it.key, it.mandatory, false, it.pub); err != nil {
					return unconfirmed("publish: " + err.Error())
				}
				return nil
			})
			if ierr != nil && cc.Err() != nil {
				err = ierr // the channel is lost: fail the rest alike
			}
		}
		if ierr != nil {
			res.Resolve(i, ierr)
		}
	}
	errs := res.Wait(ctx, confirmGrace)
	for _, d := range delayed {
		if errs != nil && errors.Is(errs[d[0]], ports.ErrNoSubscriber) { // nil: all confirmed
			c.topo.buckets.Forget(d[1]) // it expired: declare it again
		}
	}
	return errs
}

// openConfirm opens a confirm channel and starts its listener.
func (c *conn) openConfirm(ctx context.Context) (*confirmChannel, error) {
	ch, err := c.pubC.channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("amqp: confirm mode: %w", err)
	}
	cc := &confirmChannel{ch: ch, ConfirmLedger: kit.NewConfirmLedger[pend](c.opts.MaxOutstanding, 1)}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, c.opts.MaxOutstanding+1))
	// Unbuffered: amqp091 hands over a basic.return before the confirm of
	// the same message, so a returned message is never seen confirmed.
	returns := ch.NotifyReturn(make(chan amqp.Return))
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	c.listeners.Go(func() { cc.listen(confirms, returns, closed) })
	return cc, nil
}

func (c *confirmChannel) listen(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, closed <-chan *amqp.Error) {
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			c.Mark(func(p *pend) bool { // the oldest outstanding publish it matches
				match := p.returned == "" && p.exch == r.Exchange && p.key == r.RoutingKey && p.id == r.MessageId
				if match {
					p.returned = r.ReplyText + " (returned)"
				}
				return match
			})
		case cf, ok := <-confirms:
			if !ok {
				reason := "channel closed"
				if e, _ := kit.Poll(closed); e != nil {
					reason = e.Error()
				}
				c.Fail(unconfirmed(reason))
				return
			}
			c.Confirm(cf.DeliveryTag, func(p *pend) error {
				switch {
				case p.returned != "":
					return fmt.Errorf("%w: %w", ports.ErrNoSubscriber, unconfirmed(p.returned))
				case !cf.Ack:
					return unconfirmed("nack")
				}
				return nil
			})
		}
	}
}

// unconfirmed says why the broker did not confirm a publish.
func unconfirmed(reason string) error { return fmt.Errorf("%w: %s", ports.ErrUnconfirmed, reason) }
