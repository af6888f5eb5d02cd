package amqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// subscription is one running consumer of a SubscriptionSpec: a queue, and
// a consumer on a channel of the adapter's consume connection. When the
// channel or connection is lost, its supervisor reports the loss on Errors
// and establishes a new consumer (reconnecting, declaring the queue again,
// consuming again) with backoff; nothing is acked on the way, so the broker
// redelivers what was unsettled. Settlements of deliveries from the lost
// channel fail with ErrDeliveryLost.
type subscription struct {
	a            *Adapter
	spec         ports.SubscriptionSpec
	queue        string
	expires      time.Duration // x-expires of the queue; 0: none
	deleteOnStop bool
	dlGroup      string      // the dead-letter topic's group that keeps dead letters
	adopted      bool        // queue is an adopted one (Options.Existing): used passively
	bestEffort   bool        // QoS BestEffort: a non-durable queue, no requeue or dead letter
	routeBound   atomic.Bool // an adopted queue's requeue route is bound (bindRequeueRoute)

	life   context.Context // cancelled by Stop
	cancel context.CancelFunc

	errs *kit.Errors

	mu       sync.Mutex
	cur      *consumer
	ready    chan struct{} // closed while cur != nil
	stopped  bool
	stopCh   chan struct{}
	settles  int
	idle     chan struct{} // closed when settles drops to 0 after Stop
	stopDone chan struct{}
	supDone  chan struct{}
}

// ErrDeliveryLost is returned by Settle for a delivery whose channel was
// lost (connection failure or broker restart). The broker redelivers the
// message; nothing was settled.
var ErrDeliveryLost = errors.New("amqp: the channel that carried this delivery was lost; the broker redelivers it")

// consumer is one channel consuming the subscription's queue.
type consumer struct {
	sub        *subscription
	ch         *amqp.Channel
	tag        string
	deliveries <-chan amqp.Delivery
	closed     <-chan *amqp.Error
	cancelled  <-chan string
	acks       *acker
}

func newSubscription(a *Adapter, spec ports.SubscriptionSpec) *subscription {
	s := &subscription{
		a:        a,
		spec:     spec,
		queue:    a.topo.queueFor(spec),
		dlGroup:  spec.Group,
		errs:     kit.NewErrors(16),
		ready:    make(chan struct{}),
		stopCh:   make(chan struct{}),
		stopDone: make(chan struct{}),
		supDone:  make(chan struct{}),
	}
	if s.dlGroup == "" {
		s.dlGroup = "dead-letters"
	}
	s.bestEffort = spec.QoS == ports.BestEffort
	if q, ok := a.existing.queue(spec.Topic, spec.Group); ok && spec.Mode == ports.LoadBalance {
		s.queue, s.adopted = q, true
	} else if s.bestEffort && spec.Mode == ports.LoadBalance {
		s.queue = a.topo.groupQueue(spec.Topic, spec.Group, queueShape{bestEffort: true}).name
	}
	if spec.Mode == ports.Broadcast {
		s.expires = spec.InstanceTTL
		if s.expires == 0 {
			s.expires, s.deleteOnStop = a.opts.OrphanExpiry, true
		}
	}
	s.life, s.cancel = context.WithCancel(context.Background())
	return s
}

// start establishes the first consumer and starts the supervisor.
func (s *subscription) start(ctx context.Context) error {
	c, err := s.establish(ctx)
	for end := time.Now().Add(instanceSettle); err != nil && time.Now().Before(end); {
		var busy *instanceInUseError
		if !errors.As(err, &busy) || !s.pauseCtx(ctx, 100*time.Millisecond) {
			break
		}
		c, err = s.establish(ctx)
	}
	if err != nil {
		s.cancel()
		s.errs.Close()
		close(s.supDone) // no supervisor: a concurrent Stop must not wait for one
		return fmt.Errorf("amqp: subscribe %s: %w", s.queue, err)
	}
	if !s.install(c) { // stopped meanwhile (the adapter is closing)
		s.errs.Close()
		close(s.supDone)
		return ports.ErrClosed
	}
	go s.supervise(c)
	return nil
}

// establish declares the topology, opens a channel with the prefetch and
// starts consuming.
func (s *subscription) establish(ctx context.Context) (*consumer, error) {
	ch, err := s.a.subC.channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.declare(ctx, &ch); err != nil {
		ch.Close()
		return nil, err
	}
	if err := ch.Qos(s.spec.InFlight, 0, false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("set prefetch %d: %w", s.spec.InFlight, err)
	}
	c := &consumer{
		sub:       s,
		ch:        ch,
		tag:       "sluice-" + ports.NewID(),
		closed:    ch.NotifyClose(make(chan *amqp.Error, 1)),
		cancelled: ch.NotifyCancel(make(chan string, 1)),
	}
	// A BROADCAST queue belongs to one instance, so a second running
	// subscription with the same Instance is refused instead of silently
	// sharing — and so halving — the instance's copy of the stream. The
	// consumer is exclusive (a classic queue refuses a second consumer
	// with ACCESS_REFUSED, atomically); quorum queues ignore that flag, so
	// the queue's consumer count is checked before and after consuming.
	// The broker drops a consumer with its channel or connection, so a
	// reconnect after a loss takes the queue again (retrying, with backoff,
	// while the broker has not yet noticed a half-open old connection).
	exclusive := s.spec.Mode == ports.Broadcast
	if exclusive {
		if err := s.checkAlone(ch, 0); err != nil {
			ch.Close()
			return nil, err
		}
	}
	c.deliveries, err = ch.Consume(s.queue, c.tag, false, exclusive, false, false, nil)
	if err != nil {
		ch.Close()
		if exclusive && isAccessRefused(err) {
			return nil, s.instanceInUse(err)
		}
		return nil, fmt.Errorf("consume %q: %w", s.queue, err)
	}
	if exclusive {
		if err := s.checkAlone(ch, 1); err != nil {
			ch.Close() // cancels the consumer; the broker requeues what it delivered
			return nil, err
		}
	}
	c.acks = newAcker(func(tag uint64, multiple bool) error { return ch.Ack(tag, multiple) }, s.spec.InFlight)
	go c.acks.run()
	return c, nil
}

// declare declares the subscription's queue and, unless dead-lettering is
// off, the queue that keeps the dead-letter topic's messages for the
// group (so dead letters published before anyone consumes the dead-letter
// topic are not dropped).
//
// The queue's arguments are the adapter's queue type, the topic's declared
// retention and length (DeclareTopic), x-single-active-consumer for a
// SingleActive group and x-expires for a Broadcast instance; a best-effort
// subscription's queue is a non-durable classic queue. A queue that exists
// with other arguments is left as it is and the subscription fails with a
// *ports.RedeclareError naming each one. An adopted queue
// (Options.Existing) is checked to exist and never declared (its requeue
// route is bound on the first delayed requeue; existing.go). ch is
// replaced when a refusal closed it.
func (s *subscription) declare(ctx context.Context, ch **amqp.Channel) error {
	t := s.a.topo
	if s.adopted {
		if _, err := (*ch).QueueDeclarePassive(s.queue, true, false, false, false, nil); err != nil {
			return fmt.Errorf("adopted queue %q (Options.Existing) does not exist; sluice never declares an adopted queue: %w", s.queue, err)
		}
	} else {
		sh := s.a.shape(s.spec.Topic, s.spec.SingleActive, s.bestEffort)
		sh.expires = s.expires
		if err := s.declareChecked(ctx, ch, t.queueDecl(s.queue, s.spec.Topic, sh), s.spec.Topic); err != nil {
			return classify(err)
		}
	}
	if s.spec.DisableDeadLetter || s.bestEffort {
		return nil // a best-effort message is never dead-lettered
	}
	dlt := ports.DeadLetterTopic(s.spec.Topic)
	if len(dlt) > 200 {
		return nil // no dead-letter topic can be named; DeadLetter settlements will fail
	}
	if _, ok := s.a.existing.topic(dlt); ok {
		return nil // an adopted dead-letter topic: its queues exist already
	}
	dq := t.queueDecl(t.lbQueue(dlt, s.dlGroup), dlt, queueShape{})
	return classify(s.declareChecked(ctx, ch, dq, dlt))
}

// declareChecked is Adapter.declareChecked on the consume connection.
func (s *subscription) declareChecked(ctx context.Context, ch **amqp.Channel, d queueDecl, topic ports.Topic) error {
	return s.a.declareOn(ctx, s.a.subC, ch, d, topic, true)
}

// onlyTopicArgs reports whether every difference is an argument that
// comes from a topic's declaration (x-message-ttl, x-max-length).
func onlyTopicArgs(diffs []argDiff) bool {
	for _, x := range diffs {
		if x.key != "x-message-ttl" && x.key != "x-max-length" {
			return false
		}
	}
	return len(diffs) > 0
}

// isAccessRefused reports whether err is the broker's ACCESS_REFUSED (403).
func isAccessRefused(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.AccessRefused
}

// checkAlone fails with instanceInUse when the subscription's BROADCAST
// queue has more than own consumers (own: 0 before consuming, 1 after).
// Two subscriptions racing to consume may both see the other and both
// fail: loud, never silent.
func (s *subscription) checkAlone(ch *amqp.Channel, own int) error {
	q, err := ch.QueueDeclarePassive(s.queue, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("check consumers of queue %q: %w", s.queue, err)
	}
	if q.Consumers > own {
		return s.instanceInUse(fmt.Errorf("queue %q has %d other consumer(s)", s.queue, q.Consumers-own))
	}
	return nil
}

// instanceInUse is the error for a BROADCAST queue already consumed by
// another subscription: two running instances share one
// SubscriptionSpec.Instance. It is ports.ErrInvalid and wraps cause (the
// broker's refusal, or what checkAlone saw).
func (s *subscription) instanceInUse(cause error) error {
	return &instanceInUseError{fmt.Errorf("%w: %w", &ports.InstanceSharedError{
		Instance: s.spec.Instance,
		Where:    fmt.Sprintf("a running consumer on queue %q: two running instances share the same Instance", s.queue),
	}, cause)}
}

// instanceInUseError marks the error of instanceInUse, so that start can
// tell it from other failures.
type instanceInUseError struct{ err error }

func (e *instanceInUseError) Error() string { return e.err.Error() }
func (e *instanceInUseError) Unwrap() error { return e.err }

// instanceSettle is how long the first Subscribe of a BROADCAST instance
// retries while its queue still shows another consumer: a quorum queue
// counts the consumer of a channel that has just closed (a Stop right
// before, in this process or a restarted one) for a moment after.
const instanceSettle = 2 * time.Second

// classify marks a broker refusal of a declaration (a queue that exists
// with other arguments, a forbidden name) as ports.ErrInvalid.
func classify(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && (ae.Code == amqp.PreconditionFailed || ae.Code == amqp.AccessRefused) {
		return fmt.Errorf("%w: %w", ports.ErrInvalid, err)
	}
	return err
}

// install makes c the current consumer; after Stop it closes c instead.
func (s *subscription) install(c *consumer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		c.acks.stop()
		c.ch.Close()
		return false
	}
	s.cur = c
	close(s.ready)
	return true
}

// lose forgets c as the current consumer (if it still is).
func (s *subscription) lose(c *consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == c {
		s.cur = nil
		s.ready = make(chan struct{})
	}
}

// current returns the current consumer, or nil and a channel closed when
// there is one again.
func (s *subscription) current() (*consumer, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.ready
}

// supervise watches the current consumer and replaces it when it is lost,
// until Stop. It is the only sender on errs and closes it when it returns.
func (s *subscription) supervise(c *consumer) {
	defer close(s.supDone)
	defer s.errs.Close()
	for {
		var why error
		cancelled := false
		select {
		case e, ok := <-c.closed:
			if ok && e != nil {
				why = e
			} else {
				why = errors.New("channel closed")
			}
		case tag := <-c.cancelled:
			why = fmt.Errorf("consumer %s cancelled by the broker (queue deleted?)", tag)
			cancelled = true
		case <-s.stopCh:
			return
		}
		select {
		case <-s.stopCh:
			return // Stop closed the channel
		default:
		}
		s.lose(c)
		lost := c.acks.stop() // write what completed while the channel may still take it
		c.ch.Close()          // after a broker cancel: give back what it holds
		err := fmt.Errorf("amqp: subscription %s lost its channel: %w", s.queue, why)
		if lost > 0 {
			err = fmt.Errorf("%w (%d acks not written; the broker redelivers those messages)", err, lost)
		}
		s.report(err)
		if cancelled && !s.pause(s.a.opts.ReconnectBackoff) {
			// Someone deleted the queue: back off before declaring it
			// again, so as not to race whatever deletes it.
			return
		}
		if c = s.reconnect(); c == nil {
			return
		}
	}
}

// reconnect establishes a new consumer with exponential backoff and
// jitter (kit.Reconnect), reporting each failed attempt, until it succeeds
// or Stop.
func (s *subscription) reconnect() *consumer {
	o := s.a.opts
	b := kit.Backoff{Initial: o.ReconnectBackoff, Max: o.ReconnectMaxBackoff, Multiplier: 2, Jitter: 0.5}
	var c *consumer
	attempts := 0
	err := kit.Reconnect(s.life, b, func(ctx context.Context) error {
		attempts++
		nc, err := s.establish(ctx)
		if err != nil {
			return err
		}
		if !s.install(nc) {
			return kit.Permanent(ports.ErrClosed)
		}
		c = nc
		return nil
	}, func(err error) {
		s.report(fmt.Errorf("amqp: subscription %s: %w", s.queue, err))
	})
	if err != nil {
		return nil
	}
	o.Logger.Info("sluice amqp: subscription re-established", "queue", s.queue, "attempts", attempts)
	return c
}

// pauseCtx waits d; false if ctx ended first.
func (s *subscription) pauseCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pause waits d; false if Stop came first.
func (s *subscription) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stopCh:
		return false
	}
}

// report sends err on Errors without blocking; when the buffer is full the
// error is counted as dropped.
func (s *subscription) report(err error) { s.errs.Report(err) }

// Errors reports lost channels and failed reconnect attempts. It is closed
// after Stop. Errors that do not fit its buffer (16) are dropped and
// counted.
func (s *subscription) Errors() <-chan error { return s.errs.C() }

// Stop stops receiving, waits for settlements in progress (so that no ack
// races the close), writes the acks of completed settlements, then closes
// the channel: the broker requeues every delivery that was not settled.
// Stop acks nothing on its own. A BROADCAST queue without InstanceTTL is
// deleted. Stop is idempotent.
func (s *subscription) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		select {
		case <-s.stopDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.stopped = true
	close(s.stopCh)
	s.cancel()
	var idle chan struct{}
	if s.settles > 0 {
		s.idle = make(chan struct{})
		idle = s.idle
	}
	s.mu.Unlock()
	defer close(s.stopDone)
	defer s.a.forget(s)

	var errs []error
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("amqp: stop %s: settlements still in progress: %w", s.queue, ctx.Err()))
		}
	}
	select {
	case <-s.supDone:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("amqp: stop %s: reconnect still in progress: %w", s.queue, ctx.Err()))
	}
	s.mu.Lock()
	c := s.cur
	s.cur = nil
	s.mu.Unlock()
	if c != nil {
		c.acks.stop()
		if err := c.ch.Close(); err != nil && !isClosedErr(err) {
			errs = append(errs, fmt.Errorf("amqp: stop %s: close channel: %w", s.queue, err))
		}
	}
	if s.deleteOnStop {
		if err := s.deleteQueue(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Flush completes the deferred acks: it returns when every basic.ack that
// Settle accepted so far is written to the current channel (an AMQP ack
// has no reply; one lost with its channel makes the broker redeliver). It
// returns the channel's write error when an ack could not be written, and
// nil after Stop (Stop writes what is pending).
func (s *subscription) Flush(ctx context.Context) error {
	c, _ := s.current()
	if c == nil {
		return nil
	}
	if err := c.acks.wait(ctx); err != nil {
		return fmt.Errorf("amqp: flush acks of %s: %w", s.queue, err)
	}
	return nil
}

var _ ports.Flusher = (*subscription)(nil)

func (s *subscription) deleteQueue(ctx context.Context) error {
	ch, err := s.a.subC.channel(ctx)
	if err != nil {
		return fmt.Errorf("amqp: delete queue %s: %w", s.queue, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDelete(s.queue, false, false, false); err != nil {
		return fmt.Errorf("amqp: delete queue %s: %w", s.queue, err)
	}
	return nil
}

// enter admits a settlement unless the subscription stopped.
func (s *subscription) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.settles++
	return true
}

func (s *subscription) exit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settles--
	if s.settles == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}
