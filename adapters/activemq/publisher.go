package activemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/ports"
)

// pubSlot is a publish connection, dialled on first use, replaced after a
// failure.
type pubSlot struct {
	mu     sync.Mutex
	c      *stompConn
	closed bool
}

func (s *pubSlot) get(ctx context.Context, d *conn) (*stompConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	switch {
	case s.closed:
		return nil, ports.ErrClosed
	case s.c == nil:
		s.c, err = d.dial(ctx)
	}
	return s.c, err
}

// drop closes c, removing it from the slot when it is still there; or,
// closing (the adapter closes), the slot's connection, gracefully.
func (s *pubSlot) drop(c *stompConn, closing bool) {
	s.mu.Lock()
	if closing {
		c, s.closed = s.c, true
	}
	if s.c == c {
		s.c = nil
	}
	s.mu.Unlock()
	if c != nil {
		c.close(closing)
	}
}

// SendBatch publishes msgs in one transaction on one of the publish
// connections (SEND persistent:true each, COMMIT with a receipt) and
// returns once the broker stored them all; a failed commit fails all.
func (d *conn) SendBatch(ctx context.Context, msgs []ports.Message) []error {
	now := time.Now()
	return d.send(ctx, msgs, func(m *ports.Message) (string, []func(*frame.Frame) error) {
		return d.sendDest(m.Topic), d.sendExtras(m, now)
	})
}

// send sends msgs in one transaction, each where route says (with extra
// headers), and returns nil or the error of each message.
func (d *conn) send(ctx context.Context, msgs []ports.Message, route func(m *ports.Message) (string, []func(*frame.Frame) error)) []error {
	err := d.commit(ctx, msgs, route)
	if err == nil {
		return nil
	}
	errs := make([]error, len(msgs))
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (d *conn) commit(ctx context.Context, msgs []ports.Message, route func(m *ports.Message) (string, []func(*frame.Frame) error)) error {
	failing := d.opts.faults != nil && d.opts.faults.failing(msgs)
	slot := &d.slots[d.next.Add(1)%uint64(len(d.slots))]
	c, err := slot.get(ctx, d)
	if err != nil {
		return fmt.Errorf("%w: %w", ports.ErrUnconfirmed, err)
	}
	// The frames, payloads copied, are made here: f may outlive this call
	// (wait gives up on it), and msgs is the caller's once it returns.
	type frameOf struct {
		dest, ct string
		body     []byte
		opts     []func(*frame.Frame) error
	}
	frames, n := make([]frameOf, len(msgs)), 0
	for i := range msgs {
		n += len(msgs[i].Payload)
	}
	bodies := make([]byte, 0, n)
	for i := range msgs {
		dest, extra := route(&msgs[i])
		ct, opts := sendOpts(&msgs[i], extra...)
		bodies = append(bodies, msgs[i].Payload...)
		frames[i] = frameOf{dest, ct, bodies[len(bodies)-len(msgs[i].Payload):], opts}
	}
	err = c.wait(ctx, func() error {
		tx, err := c.c.BeginWithError()
		if err != nil {
			return err
		}
		for _, f := range frames {
			if err := tx.Send(f.dest, f.ct, f.body, f.opts...); err != nil {
				return err
			}
		}
		if failing {
			return errors.Join(tx.AbortWithReceipt(), errInjectedSend)
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
	}
	slot.drop(c, false)
	return fmt.Errorf("%w: no COMMIT receipt from %s: %w (the connection was replaced; the messages may or may not be stored)", ports.ErrUnconfirmed, d.opts.Addr, err)
}

var errInjectedSend = errors.New("injected fault: the send transaction was aborted")
