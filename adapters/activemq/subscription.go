package activemq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/sluicemq/sluice/adapters"
	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// subscription consumes one queue over a connection of its own
// (ack:client-individual, activemq.prefetchSize = InFlight). ReceiveBatch
// reads go-stomp's channel itself, returns a lost connection (the portable
// layer retries after a backoff) and redials on its next call.
type subscription struct {
	d     *conn
	spec  ports.SubscriptionSpec
	queue string
	wake  chan struct{} // capacity 1: pending grew
	recs  []driver.Record
	facts []frameFacts // carved one a record, 32 at a time

	mu      sync.Mutex
	cur     *stompConn       // nil after a loss, until ReceiveBatch reconnects
	pending []*stomp.Message // taken off cur during a receipt wait: handed out first
}

var (
	_ driver.Subscription  = (*subscription)(nil)
	_ driver.AckFlusher    = (*subscription)(nil)
	_ driver.RequeueCopier = (*subscription)(nil)
	_ driver.Abandoner     = (*subscription)(nil)
)

// Subscribe connects the subscription to its queue (see connect).
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

// connect dials, subscribes and waits for a receipt barrier, so that a
// message sent afterwards reaches the queue (a backlog goes to pending).
func (s *subscription) connect(ctx context.Context) (*stompConn, error) {
	c, err := s.d.dial(ctx, s.instanceClientID()...)
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

// current returns the subscription's connection, nil after a loss.
func (s *subscription) current() *stompConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// keep puts a message taken during a receipt wait in pending.
func (s *subscription) keep(m *stomp.Message) {
	s.mu.Lock()
	s.pending = append(s.pending, m)
	s.mu.Unlock()
	kit.Signal(s.wake)
}

// drain reads sub until go-stomp closes it (a subscription nobody reads
// blocks its connection); the broker hands out again what it reads.
func drain(sub *stomp.Subscription) {
	for range sub.C {
	}
}

// errReconnect marks a failed reconnect: always retried (conn.Classify).
var errReconnect = errors.New("activemq: reconnect")

// ReceiveBatch returns up to max records, blocking for at least one, and
// acknowledges those KeyFilter rejects (ActiveMQ has no path patterns).
func (s *subscription) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	cur := s.current()
	if cur == nil {
		c, err := s.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%w: %w", errReconnect, err)
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
		if len(s.facts) == 0 {
			s.facts = make([]frameFacts, 32)
		}
		s.recs, s.facts = append(s.recs, decode(m, &s.facts[0])), s.facts[1:]
	}
}

// lose gives cur up after its delivery channel ended (m: the error message
// or nil); the batch's records are dropped: the broker redelivers them. It
// returns nil when Abandon closed cur.
func (s *subscription) lose(cur *stompConn, m *stomp.Message) error {
	s.mu.Lock()
	s.cur, s.pending = nil, nil
	s.mu.Unlock()
	cur.close(false)
	if cur.abandoned.Load() {
		return nil // no fault: the next ReceiveBatch connects again
	}
	err := errLost
	if m != nil {
		err = fmt.Errorf("%w: %w", errLost, m.Err)
	}
	return fmt.Errorf("activemq: subscription %s lost its connection to %s; its unsettled deliveries go back to the queue: %w", s.queue, s.d.opts.Addr, err)
}

// SendAcks writes an ACK frame per record (no receipt in STOMP):
// deferred, completed by FlushAcks. A round with a record of a lost
// connection acks none of them (ErrRecordsLost): flow settles each again,
// the broker hands the lost one out again, and no record is acked twice
// (ActiveMQ refuses a second ACK with an ERROR frame).
func (s *subscription) SendAcks(_ context.Context, handles []any) error {
	cur := s.current()
	for _, h := range handles { // all or none: flow settles a failed round's members again, one by one
		if m := h.(*stomp.Message); cur == nil || cur.isDead() || m.Conn != cur.c {
			return fmt.Errorf("activemq: ACK on %s: a message was received on a lost connection: %w", s.queue, driver.ErrRecordsLost)
		}
	}
	for _, h := range handles {
		if err := cur.c.Ack(h.(*stomp.Message)); errors.Is(err, stomp.ErrClosedUnexpectedly) {
			return fmt.Errorf("activemq: ACK on %s: the connection was lost: %w", s.queue, driver.ErrRecordsLost)
		} else if err != nil {
			return fmt.Errorf("activemq: ACK on %s: %w", s.queue, err)
		}
	}
	return nil
}

// FlushAcks returns once the broker processed the ACKs written so far (a
// receipt barrier); after a loss there is nothing: the broker redelivers.
func (s *subscription) FlushAcks(ctx context.Context) error {
	cur := s.current()
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

// Abandon lets the broker hand out again the messages of a failed
// settlement (a dead-letter publish not confirmed): ActiveMQ redelivers an
// unacknowledged message only once its consumer's connection goes (a
// STOMP NACK moves it to the broker's own dead-letter queue), so their
// connection is closed, once, and ReceiveBatch redials (the portable
// layer calls it a second after the failure: no reconnect storm). The
// messages in flight on it go back too: their ACKs fail as lost.
func (s *subscription) Abandon(handles []any) {
	cur := s.current() // a lost connection's messages are the broker's again already
	if cur != nil && slices.ContainsFunc(handles, func(h any) bool { return h.(*stomp.Message).Conn == cur.c }) && cur.abandoned.CompareAndSwap(false, true) {
		_ = cur.nc.Close()
	}
}

// Close disconnects after the ACKs written (cut short when ctx is done);
// the broker hands the unacknowledged messages to the next consumer.
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

// instanceClientID is the STOMP client-id of a Broadcast subscription's
// connection, one per instance queue: ActiveMQ allows one connection per
// client id, so the broker itself refuses a second subscription of a
// running instance (InvalidClientIDException, "already connected").
func (s *subscription) instanceClientID() []func(*stomp.Conn) error {
	if s.spec.Mode != ports.Broadcast {
		return nil
	}
	return []func(*stomp.Conn) error{stomp.ConnOpt.Header("client-id", "sluice-instance:"+s.queue)}
}

// instanceRefused turns the broker's refusal of a Broadcast connection's
// client id into a *ports.InstanceSharedError; other errors pass. The
// refusal can arrive as a connection closed in the handshake (ActiveMQ
// closes without waiting for its ERROR frame to go out), as from a port
// that is not plaintext STOMP: when a connection without the client id is
// accepted, the client id was refused.
func (s *subscription) instanceRefused(ctx context.Context, err error) error {
	if err == nil || s.spec.Mode != ports.Broadcast {
		return err
	}
	msg := err.Error()
	refused := strings.Contains(msg, "InvalidClientID") || strings.Contains(msg, "already connected")
	if !refused && adapters.ClosedEarly(err) {
		if c, perr := s.d.dial(ctx); perr == nil {
			c.close(true)
			refused = true
			msg = "it closed the connection that carried the client id in the handshake and accepted one without it: " + msg
		}
	}
	if refused {
		return &ports.InstanceSharedError{Instance: s.spec.Instance, Where: fmt.Sprintf(
			"the broker refused a second connection with client id %q for queue %s: %s", "sluice-instance:"+s.queue, s.queue, msg)}
	}
	return err
}
