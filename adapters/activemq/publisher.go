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
	a     *Adapter
	next  atomic.Uint64
	slots []*pubSlot
}

type pubSlot struct {
	mu     sync.Mutex
	c      *conn
	closed bool
}

func newPublisher(a *Adapter) *publisher {
	p := &publisher{a: a, slots: make([]*pubSlot, a.opts.PublishConns)}
	for i := range p.slots {
		p.slots[i] = &pubSlot{}
	}
	return p
}

// warm dials the first connection, so New fails fast on a bad address.
func (p *publisher) warm(ctx context.Context) error {
	_, err := p.slots[0].get(ctx, p.a)
	return err
}

func (s *pubSlot) get(ctx context.Context, a *Adapter) (*conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ports.ErrClosed
	}
	if s.c != nil {
		return s.c, nil
	}
	c, err := a.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.c = c
	return c, nil
}

// drop closes c if it is still the slot's connection.
func (s *pubSlot) drop(c *conn) {
	s.mu.Lock()
	if s.c == c {
		s.c = nil
	}
	s.mu.Unlock()
	c.close(false)
}

// publish sends msgs (validated and stamped) to their topics in one
// transaction.
func (p *publisher) publish(ctx context.Context, msgs []ports.Message) error {
	now := time.Now()
	return p.send(ctx, msgs, p.a.opts.faults.sendsFailing(), func(_ int, m *ports.Message) (string, []func(*frame.Frame) error) {
		return p.a.sendDest(m.Topic), p.a.sendExtras(m, now)
	})
}

// publishCopies sends settlement copies (requeue or dead-letter copies,
// already carrying their envelope), each to the destination dest names,
// in one transaction committed with a receipt. A nil error means the
// broker stored every copy.
func (p *publisher) publishCopies(ctx context.Context, msgs []ports.Message, dest func(i int) string) error {
	return p.send(ctx, msgs, false, func(i int, _ *ports.Message) (string, []func(*frame.Frame) error) {
		return dest(i), nil
	})
}

// send sends msgs in one transaction, each to the destination (and with
// the extra headers) route gives for message i;
// failing aborts the transaction instead of committing it (FailSends).
func (p *publisher) send(ctx context.Context, msgs []ports.Message, failing bool, route func(i int, m *ports.Message) (string, []func(*frame.Frame) error)) error {
	slot := p.slots[p.next.Add(1)%uint64(len(p.slots))]
	c, err := slot.get(ctx, p.a)
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
			dest, extra := route(i, m)
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
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errInjectedSend):
		return fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err)
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return err // outcome unknown: the commit may still happen
	default:
		slot.drop(c)
		return fmt.Errorf("%w: no COMMIT receipt from %s: %w (the connection was replaced; the messages may or may not be stored)", ports.ErrUnconfirmed, p.a.opts.Addr, err)
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
