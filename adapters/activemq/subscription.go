package activemq

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

// subscription consumes one queue over a connection of its own with
// ack:client-individual and activemq.prefetchSize = InFlight; ReceiveBatch
// reads go-stomp's delivery channel itself. A lost connection is returned
// by ReceiveBatch (the portable layer reports it and retries after a
// backoff), and the next ReceiveBatch redials: the broker hands the lost
// connection's unacknowledged messages out again.
type subscription struct {
	d     *conn
	spec  ports.SubscriptionSpec
	queue string
	wake  chan struct{} // capacity 1: pending grew
	recs  []driver.Record

	mu      sync.Mutex
	cur     *stompConn       // nil after a loss, until ReceiveBatch reconnects
	pending []*stomp.Message // taken off cur during a receipt wait: handed out first
}

var (
	_ driver.Subscription  = (*subscription)(nil)
	_ driver.AckFlusher    = (*subscription)(nil)
	_ driver.RequeueCopier = (*subscription)(nil)
)

// Subscribe opens the subscription's own connection, subscribes to its
// queue and returns once the broker processed the SUBSCRIBE (a receipt
// barrier), so a message sent afterwards reaches it.
func (d *conn) Subscribe(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
	if spec.Mode == ports.Broadcast && isDeadLetterTopic(spec.Topic) {
		return nil, fmt.Errorf("%w: BROADCAST of the dead-letter topic %q: on ActiveMQ a dead-letter topic is one queue whose consumers compete (subscribe with LOAD_BALANCE)", ports.ErrUnsupported, spec.Topic)
	}
	queue, err := d.queueFor(spec)
	if err != nil {
		return nil, err
	}
	s := &subscription{d: d, spec: spec, queue: queue, wake: make(chan struct{}, 1)}
	if s.cur, err = s.connect(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// connect dials, subscribes and waits for the broker to have processed
// the SUBSCRIBE. A queue with a backlog delivers before the barrier's
// receipt: those messages are kept in pending.
func (s *subscription) connect(ctx context.Context) (*stompConn, error) {
	c, err := s.d.dial(ctx, s.instanceClientID()...) // instance.go
	if err != nil {
		return nil, s.instanceRefused(ctx, err)
	}
	c.sub, err = c.c.Subscribe(s.queue, stomp.AckClientIndividual, subscribeOpts(s.spec)...)
	if err == nil {
		if err = c.wait(ctx, c.barrier, c.sub.C, s.keep); err != nil {
			go drain(c.sub)
		}
	}
	if err != nil {
		c.close(false)
		s.mu.Lock()
		s.pending = nil
		s.mu.Unlock()
		return nil, fmt.Errorf("activemq: subscribe to %s at %s: %w", s.queue, s.d.opts.Addr, err)
	}
	return c, nil
}

// keep puts a message taken off the connection during a receipt wait in
// pending.
func (s *subscription) keep(m *stomp.Message) {
	s.mu.Lock()
	s.pending = append(s.pending, m)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// drain reads sub until go-stomp closes it: a subscription nobody reads
// blocks its whole connection (receipts included). What it reads is not
// acknowledged: the broker hands it out again.
func drain(sub *stomp.Subscription) {
	for range sub.C {
	}
}

// reconnectError is a failed reconnect of a subscription: always worth
// another attempt (see conn.Classify).
type reconnectError struct{ err error }

func (e *reconnectError) Error() string { return "activemq: reconnect: " + e.err.Error() }
func (e *reconnectError) Unwrap() error { return e.err }

// ReceiveBatch returns up to max records, blocking for at least one;
// after a lost connection it reconnects first. A record whose partition
// key KeyFilter rejects is acknowledged without being handed out
// (ActiveMQ cannot filter on a path pattern).
func (s *subscription) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		c, err := s.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, &reconnectError{err}
		}
		s.mu.Lock()
		s.cur, cur = c, c
		s.mu.Unlock()
	}
	s.recs = s.recs[:0]
	for len(s.recs) == 0 {
		s.mu.Lock()
		for len(s.pending) > 0 && len(s.recs) < max {
			s.add(cur, s.pending[0])
			s.pending = s.pending[1:]
		}
		s.mu.Unlock()
		if len(s.recs) > 0 {
			break
		}
		select {
		case m, ok := <-cur.sub.C:
			if !ok || m.Err != nil {
				return nil, s.lose(cur, m)
			}
			s.add(cur, m)
		case <-s.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for len(s.recs) < max { // what else is there, without waiting
		select {
		case m, ok := <-cur.sub.C:
			if !ok || m.Err != nil {
				return nil, s.lose(cur, m)
			}
			s.add(cur, m)
		default:
			return s.recs, nil
		}
	}
	return s.recs, nil
}

// add appends the record of m, received on cur.
func (s *subscription) add(cur *stompConn, m *stomp.Message) {
	switch {
	case m.Conn != cur.c: // pending from a connection lost since
	case !s.spec.MatchKey(m.Header.Get(ports.HeaderPartitionKey)):
		_ = cur.c.Ack(m)
	default:
		s.recs = append(s.recs, decode(m))
	}
}

// lose gives cur up after its delivery channel ended (with m, an error
// message, or nil) and returns the error ReceiveBatch reports. The records
// of the batch are dropped: the broker hands them out again.
func (s *subscription) lose(cur *stompConn, m *stomp.Message) error {
	s.mu.Lock()
	s.cur, s.pending = nil, nil
	s.mu.Unlock()
	cur.close(false)
	err := errLost
	if m != nil {
		err = fmt.Errorf("%w: %w", errLost, m.Err)
	}
	return fmt.Errorf("activemq: subscription %s lost its connection to %s; its unsettled deliveries go back to the queue: %w", s.queue, s.d.opts.Addr, err)
}

// SendAcks writes an ACK frame per record on its connection (STOMP cannot
// ask a receipt for it): deferred, completed by FlushAcks. A record whose
// connection was lost is skipped: the broker took it back with the
// connection and hands it out again, so nothing of it is left to
// acknowledge here.
func (s *subscription) SendAcks(_ context.Context, handles []any) error {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return nil
	}
	for _, h := range handles {
		m := h.(*stomp.Message)
		if m.Conn != cur.c || cur.isDead() {
			continue
		}
		if err := cur.c.Ack(m); err != nil && !errors.Is(err, stomp.ErrClosedUnexpectedly) {
			return fmt.Errorf("activemq: ACK on %s: %w", s.queue, err)
		}
	}
	return nil
}

// FlushAcks completes the ACKs written so far: it returns once the broker
// processed them (a receipt barrier on the current connection). Nothing
// deferred survives a lost connection: the broker redelivers.
func (s *subscription) FlushAcks(ctx context.Context) error {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return nil
	}
	if err := cur.wait(ctx, cur.barrier, cur.sub.C, s.keep); err != nil {
		return fmt.Errorf("activemq: flush of %s: %w (unconfirmed ACKs are redelivered)", s.queue, err)
	}
	return nil
}

// SendRequeueCopies sends the portable layer's requeue copies to the
// subscription's own queue, in one transaction committed with a receipt.
func (s *subscription) SendRequeueCopies(ctx context.Context, msgs []ports.Message) []error {
	return s.d.send(ctx, msgs, func(*ports.Message) (string, []func(*frame.Frame) error) { return s.queue, nil })
}

// Close disconnects (DISCONNECT after every ACK written before it, cut
// short when ctx is done); the broker hands every unacknowledged message
// to the queue's next consumer.
func (s *subscription) Close(ctx context.Context) error {
	s.mu.Lock()
	cur := s.cur
	s.cur, s.pending = nil, nil
	s.mu.Unlock()
	if cur != nil {
		go drain(cur.sub) // so that go-stomp can hand over the DISCONNECT receipt
		defer context.AfterFunc(ctx, func() { _ = cur.nc.Close() })()
		cur.close(true)
	}
	return nil
}
