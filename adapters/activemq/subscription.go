package activemq

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Subscription consumes one queue over a connection of its own with
// ack:client-individual and activemq.prefetchSize = InFlight, and
// reconnects (resubscribing) when the connection is lost.
//
// Settlement (Settle):
//
//   - ACK: a STOMP ACK frame written to the delivery's connection —
//     deferred: STOMP ACK has no receipt. Flush completes it (a receipt
//     barrier on the connection); a lost connection makes the broker
//     redeliver, never lose.
//   - REQUEUE: a copy with the redelivery count + 1 (and
//     AMQ_SCHEDULED_DELAY for the delay) is sent to the subscription's
//     queue in a publisher transaction committed with a receipt; once the
//     broker confirmed it, the original's ACK is written as for ACK
//     (deferred). A copy not confirmed fails Settle and acks nothing.
//   - DEAD_LETTER: the same with the dead-letter copy sent to the
//     "<topic>.dlq" queue.
//
// A delivery whose connection was lost cannot be settled (the broker
// already handed it back): Settle returns an error for it and it comes
// again on the new connection.
type Subscription struct {
	a       *Adapter
	spec    ports.SubscriptionSpec
	queue   string
	inbox   *kit.Inbox[*ports.Delivery]
	errs    *kit.Errors
	settler *kit.Settler

	mu      sync.Mutex
	cur     *consumerConn
	stopped bool

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	gen    atomic.Uint64
}

var (
	_ ports.Subscription = (*Subscription)(nil)
	_ ports.Flusher      = (*Subscription)(nil)
)

// consumerConn is one connection of a subscription and its STOMP
// subscription; lost is closed when it is gone.
type consumerConn struct {
	*conn
	sub  *stomp.Subscription
	gen  uint64
	lost chan struct{}
	once sync.Once
}

func (c *consumerConn) markLost() { c.once.Do(func() { close(c.lost) }) }

func (c *consumerConn) isLost() bool {
	select {
	case <-c.lost:
		return true
	default:
		return false
	}
}

// handle is a delivery's settlement handle.
type handle struct {
	claim kit.Claim
	m     *stomp.Message
	cc    *consumerConn
}

func (h *handle) Claim() *kit.Claim { return &h.claim }

func newSubscription(ctx context.Context, a *Adapter, spec ports.SubscriptionSpec) (*Subscription, error) {
	queue, err := a.queueFor(spec)
	if err != nil {
		return nil, err
	}
	s := &Subscription{
		a: a, spec: spec, queue: queue,
		inbox: kit.NewInbox[*ports.Delivery](0),
		errs:  kit.NewErrors(64),
		done:  make(chan struct{}),
	}
	s.settler = kit.NewSettler(settleBroker{s})
	cc, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	s.cur = cc
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// The pump runs before the barrier: a queue with a backlog starts
	// delivering at once, and go-stomp hands the barrier's receipt over
	// only after the messages ahead of it were taken.
	go s.run(cc)
	if err := cc.wait(ctx, cc.barrier); err != nil {
		_ = s.Stop(context.Background())
		return nil, fmt.Errorf("activemq: subscribe to %s at %s: %w", s.queue, s.a.opts.Addr, err)
	}
	return s, nil
}

// connect dials and subscribes (newSubscription then waits for the
// broker to have processed the SUBSCRIBE).
func (s *Subscription) connect(ctx context.Context) (*consumerConn, error) {
	c, err := s.a.dial(ctx, s.instanceClientID()...) // instance.go
	if err != nil {
		return nil, s.instanceRefused(ctx, err)
	}
	sub, err := c.c.Subscribe(s.queue, stomp.AckClientIndividual, subscribeOpts(s.spec)...)
	if err != nil {
		c.close(false)
		return nil, fmt.Errorf("activemq: subscribe to %s at %s: %w", s.queue, s.a.opts.Addr, err)
	}
	return &consumerConn{conn: c, sub: sub, gen: s.gen.Add(1), lost: make(chan struct{})}, nil
}

// run pumps the current connection's messages into the inbox and
// reconnects after a loss, until Stop.
func (s *Subscription) run(cc *consumerConn) {
	defer close(s.done)
	backoff := kit.Backoff{Initial: s.a.opts.ReconnectBackoff, Max: s.a.opts.ReconnectMaxBackoff}
	for {
		err := s.pump(cc)
		// Nobody reads the STOMP subscription any more: drain it so that
		// go-stomp's connection goroutine is never blocked handing over a
		// message (and can process the DISCONNECT receipt). Drained
		// messages are unacknowledged: the broker redelivers them. The
		// channel closes when the connection ends.
		go func(sub *stomp.Subscription) {
			for range sub.C {
			}
		}(cc.sub)
		if s.ctx.Err() != nil {
			return // stopped: Stop disconnects cc
		}
		cc.markLost()
		cc.close(false)
		s.errs.Report(fmt.Errorf("activemq: subscription %s lost its connection to %s: %v; its unsettled deliveries go back to the queue, reconnecting", s.queue, s.a.opts.Addr, err))
		var next *consumerConn
		rerr := kit.Reconnect(s.ctx, backoff, func(ctx context.Context) error {
			c, err := s.connect(ctx)
			if err != nil {
				return err
			}
			next = c
			return nil
		}, func(err error) { s.errs.Report(fmt.Errorf("activemq: subscription %s: %w", s.queue, err)) })
		if rerr != nil {
			return // stopped
		}
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			next.markLost()
			next.close(false)
			return
		}
		s.cur = next
		s.mu.Unlock()
		cc = next
	}
}

// pump moves messages into the inbox until the subscription's channel
// ends; it returns why.
func (s *Subscription) pump(cc *consumerConn) error {
	for {
		select {
		case m, ok := <-cc.sub.C:
			if !ok {
				return errLost
			}
			if m.Err != nil {
				return m.Err
			}
			d := decode(m, s.spec.Topic)
			if _, err := kit.TakeNotBefore(d.Headers); err != nil && d.Err == nil {
				d.Err = err
			}
			d.Facts["connection"] = strconv.FormatUint(cc.gen, 10)
			d.Handle = &handle{m: m, cc: cc}
			if !s.spec.MatchKey(d.Key) {
				// Not for this subscription (ActiveMQ cannot filter on a
				// path pattern): acknowledged without handling.
				_ = cc.c.Ack(m)
				continue
			}
			if err := s.inbox.Push(s.ctx, d); err != nil {
				return err
			}
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
	}
}

// Receive returns up to max deliveries, blocking for at least one.
// Deliveries of a connection lost meanwhile are dropped here: the broker
// hands them to the next connection.
func (s *Subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	for {
		ds, err := s.inbox.Receive(ctx, max)
		if err != nil {
			return nil, err
		}
		live := ds[:0]
		for _, d := range ds {
			if !d.Handle.(*handle).cc.isLost() {
				live = append(live, d)
			}
		}
		if len(live) > 0 {
			return live, nil
		}
	}
}

// Settle applies disp to ds (see Subscription for what each action is).
// On a best-effort subscription Requeue and DeadLetter acknowledge, as Ack
// does (kit.BestEffortDisposition).
func (s *Subscription) Settle(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	disp = kit.BestEffortDisposition(s.spec, disp)
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return ports.ErrClosed
	}
	return s.settler.Settle(ctx, ds, disp)
}

// settleBroker is the kit.Broker of a subscription: Ack writes ACK frames,
// and Requeue and DeadLetter (kit.NativeRequeue, kit.NativeDeadLetter)
// send confirmed copies to a queue of their own, then ack (copyThenAck).
type settleBroker struct{ s *Subscription }

var (
	_ kit.NativeRequeue    = settleBroker{}
	_ kit.NativeDeadLetter = settleBroker{}
)

// byConn groups ds by connection; deliveries of a lost connection become
// errors.
func byConn(ds []*ports.Delivery, a ports.Action) (map[*consumerConn][]*ports.Delivery, error) {
	groups := map[*consumerConn][]*ports.Delivery{}
	var lost int
	for _, d := range ds {
		h, ok := d.Handle.(*handle)
		if !ok {
			return nil, &ports.ValueError{Field: "Delivery.Handle", Reason: fmt.Sprintf("of message %q was not handed out by an activemq subscription", d.ID)}
		}
		if h.cc.isLost() {
			lost++
			continue
		}
		groups[h.cc] = append(groups[h.cc], d)
	}
	if lost > 0 {
		return nil, fmt.Errorf("activemq: %v of %d deliveries not settled: their consumer connection was lost, the broker hands them out again: %w", a, lost, errLost)
	}
	return groups, nil
}

func (b settleBroker) Ack(ctx context.Context, ds []*ports.Delivery) error {
	groups, err := byConn(ds, ports.Ack)
	if err != nil {
		return err
	}
	for cc, g := range groups {
		for _, d := range g {
			if err := cc.c.Ack(d.Handle.(*handle).m); err != nil {
				cc.markLost()
				return fmt.Errorf("activemq: ACK of %q: %w (the broker redelivers it)", d.ID, err)
			}
		}
	}
	return nil
}

// Publish is the kit.Broker publish (unused: Requeue and DeadLetter are
// native transactions), a confirmed Send.
func (b settleBroker) Publish(ctx context.Context, msgs []ports.Message) []error {
	if err := b.s.a.Send(ctx, msgs...); err != nil {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return nil
}

func (b settleBroker) Requeue(ctx context.Context, ds []*ports.Delivery, delay time.Duration) error {
	return b.s.copyThenAck(ctx, ds, ports.Requeue, func(d *ports.Delivery) (string, ports.Message) {
		return b.s.queue, kit.RequeueCopy(d, delay)
	})
}

func (b settleBroker) DeadLetter(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	if b.s.a.opts.faults.deadLettersFailing() {
		return errInjectedDeadLetter
	}
	return b.s.copyThenAck(ctx, ds, ports.DeadLetter, func(d *ports.Delivery) (string, ports.Message) {
		m := kit.DeadLetterCopy(d, disp)
		return b.s.a.sendDest(m.Topic), m
	})
}

// copyThenAck publishes a copy of each delivery with a receipt (the
// publisher's transaction) and, only once the broker confirmed every
// copy, acknowledges the originals as Ack does (written, completed by
// Flush). It never leaves a settlement in doubt: a copy whose receipt is
// missing fails the call and leaves every original unsettled, so the
// broker redelivers it (the copies that were stored become duplicates, as
// at-least-once allows); an ACK lost with its connection makes the broker
// redeliver the original, which is settled again. (A transaction holding
// the copies and the ACKs together would be in doubt when its COMMIT
// receipt is lost: committed, the original is gone while Settle reported
// a failure.)
func (s *Subscription) copyThenAck(ctx context.Context, ds []*ports.Delivery, a ports.Action, copyOf func(*ports.Delivery) (string, ports.Message)) error {
	if _, err := byConn(ds, a); err != nil {
		return err
	}
	msgs := make([]ports.Message, len(ds))
	dests := make([]string, len(ds))
	for i, d := range ds {
		dests[i], msgs[i] = copyOf(d)
	}
	if err := s.a.pub.publishCopies(ctx, msgs, func(i int) string { return dests[i] }); err != nil {
		return fmt.Errorf("activemq: %v of %d deliveries: copies not confirmed, originals left unsettled: %w", a, len(ds), err)
	}
	return settleBroker{s}.Ack(ctx, ds)
}

// Flush completes the ACKs written so far: it returns once the broker
// processed them (a receipt barrier on the current connection).
func (s *Subscription) Flush(ctx context.Context) error {
	s.mu.Lock()
	cc := s.cur
	s.mu.Unlock()
	if cc == nil || cc.isLost() {
		return nil // nothing deferred survives a lost connection: the broker redelivers
	}
	if err := cc.wait(ctx, cc.barrier); err != nil {
		return fmt.Errorf("activemq: flush of %s: %w (unconfirmed ACKs are redelivered)", s.queue, err)
	}
	return nil
}

// Stop stops receiving and disconnects; every unsettled delivery goes back
// to the queue. It is idempotent.
func (s *Subscription) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return s.waitDone(ctx)
	}
	s.stopped = true
	cc := s.cur
	s.mu.Unlock()
	s.cancel()
	s.inbox.Close()
	if cc != nil {
		// DISCONNECT after every ACK written before it; the broker then
		// redelivers what was not acknowledged.
		disconnected := make(chan struct{})
		go func() {
			defer close(disconnected)
			cc.markLost()
			cc.close(true)
		}()
		grace := time.NewTimer(time.Second) // for a ctx that is done already
		defer grace.Stop()
		select {
		case <-disconnected:
		case <-ctx.Done():
			select {
			case <-disconnected:
			case <-grace.C:
				_ = cc.nc.Close()
				<-disconnected
			}
		}
	}
	err := s.waitDone(ctx)
	s.errs.Close()
	s.a.forget(s)
	return err
}

func (s *Subscription) waitDone(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Errors reports connection losses and failed reconnects.
func (s *Subscription) Errors() <-chan error { return s.errs.C() }
