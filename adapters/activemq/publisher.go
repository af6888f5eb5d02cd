package activemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/ports"
)

// publisher spreads Send transactions over a few connections, each dialled
// on first use and replaced after a failure.
type publisher struct {
	d     *conn
	next  atomic.Uint64
	slots []*pubSlot
}

type pubSlot struct {
	mu     sync.Mutex
	c      *stompConn
	closed bool
}

func newPublisher(d *conn) *publisher {
	p := &publisher{d: d, slots: make([]*pubSlot, d.opts.PublishConns)}
	for i := range p.slots {
		p.slots[i] = &pubSlot{}
	}
	return p
}

// warm dials the first connection, so New fails fast on a bad address.
func (p *publisher) warm(ctx context.Context) error {
	_, err := p.slots[0].get(ctx, p.d)
	return err
}

func (s *pubSlot) get(ctx context.Context, d *conn) (*stompConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ports.ErrClosed
	}
	if s.c != nil {
		return s.c, nil
	}
	c, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.c = c
	return c, nil
}

// drop closes c if it is still the slot's connection.
func (s *pubSlot) drop(c *stompConn) {
	s.mu.Lock()
	if s.c == c {
		s.c = nil
	}
	s.mu.Unlock()
	c.close(false)
}

// SendBatch publishes msgs (validated and stamped by the portable layer)
// to their topics in one STOMP transaction on one of the publish
// connections (SEND persistent:true for each, then COMMIT with a receipt)
// and returns once the receipt arrived: the broker stored every message.
// Concurrent calls pipeline their transactions over the connections. A
// failed commit fails every message of the call (none was stored).
func (d *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	now := time.Now()
	return d.pub.send(ctx, msgs, func(m *ports.Message) (string, []func(*frame.Frame) error) {
		return d.sendDest(m.Topic), d.sendExtras(m, now)
	})
}

// send sends msgs in one transaction, each to the destination (and with
// the extra headers) route gives for it, and returns nil, or the error of
// every message. A fault switch on (Faults) aborts the transaction instead
// of committing it.
func (p *publisher) send(ctx context.Context, msgs []ports.Message, route func(m *ports.Message) (string, []func(*frame.Frame) error)) []error {
	if err := p.commit(ctx, msgs, route); err != nil {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return nil
}

func (p *publisher) commit(ctx context.Context, msgs []ports.Message, route func(m *ports.Message) (string, []func(*frame.Frame) error)) error {
	failing := p.d.opts.faults.failing(msgs)
	slot := p.slots[p.next.Add(1)%uint64(len(p.slots))]
	c, err := slot.get(ctx, p.d)
	if err != nil {
		return fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err)
	}
	err = c.wait(ctx, func() error {
		tx, err := c.c.BeginWithError()
		if err != nil {
			return err
		}
		for i := range msgs {
			m := &msgs[i]
			dest, extra := route(m)
			ct, opts := sendOpts(m, extra...)
			if err := tx.Send(dest, ct, m.Payload, opts...); err != nil {
				return err
			}
		}
		if failing {
			if err := tx.AbortWithReceipt(); err != nil {
				return err
			}
			return errInjectedSend
		}
		return tx.CommitWithReceipt()
	}, nil, nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errInjectedSend):
		return fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err // outcome unknown: the commit may still happen
	default:
		slot.drop(c)
		return fmt.Errorf("%w: no COMMIT receipt from %s: %w (the connection was replaced; the messages may or may not be stored)", ports.ErrUnconfirmed, p.d.opts.Addr, err)
	}
}

func (p *publisher) close() {
	for _, s := range p.slots {
		s.mu.Lock()
		c := s.c
		s.c, s.closed = nil, true
		s.mu.Unlock()
		if c != nil {
			c.close(true)
		}
	}
}
