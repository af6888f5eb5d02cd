package wmbridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/ports"
)

// SubscriberConfig configures a Subscriber. Zero fields take the defaults
// named in their comments.
type SubscriberConfig struct {
	// Group is the LOAD_BALANCE group: subscribers with the same Group
	// share the group's queue (or consumer group) per topic and compete
	// for its messages. Default "watermill".
	Group string
	// InFlight is how many messages a Subscribe hands out before the first
	// of them is acked or nacked (and the adapter's prefetch). Default 1,
	// which is what Watermill subscribers usually do: the router then
	// handles one message at a time per subscription.
	InFlight int
	// NackDelay is how long a nacked message waits before it is
	// redelivered, by the adapter's delayed requeue (a delay queue, a
	// scheduled delivery, the pending list's idle time, or the local
	// scheduler). Default 0: it is requeued at once, with its redelivery
	// count incremented. Ignored when NackBackoff is set.
	NackDelay time.Duration
	// NackBackoff, if set, paces the redeliveries of nacked messages as
	// the flow core paces retries: the n-th redelivery waits
	// NackBackoff.Delay(n) (defaults applied, see ports.RetryPolicy).
	// Watermill decides when to give up on a message, so MaxAttempts is
	// not used: a message is requeued for as long as the handler nacks it.
	NackBackoff *ports.RetryPolicy
	// OnError, if set, receives the subscriptions' asynchronous errors
	// (lost connections, reconnect attempts), failed settlements and the
	// dead-lettering of unreadable deliveries: Watermill has no channel
	// for them. It must not block.
	OnError func(error)
}

// Subscriber is a Watermill message.Subscriber over a sluice adapter; see
// the package documentation for how Ack, Nack, unreadable deliveries and
// Close are carried out.
type Subscriber struct {
	a       ports.Adapter
	cfg     SubscriberConfig
	backoff ports.RetryPolicy

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// settleTimeout bounds one settlement, Flush or Stop after the
// subscription's context ended.
const settleTimeout = 30 * time.Second

// NewSubscriber returns a subscriber over a. Closing the subscriber does
// not close a.
func NewSubscriber(a ports.Adapter, cfg SubscriberConfig) *Subscriber {
	if cfg.Group == "" {
		cfg.Group = "watermill"
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = 1
	}
	s := &Subscriber{a: a, cfg: cfg, closing: make(chan struct{})}
	if cfg.NackBackoff != nil {
		s.backoff = cfg.NackBackoff.WithDefaults()
	}
	return s
}

func (w *Subscriber) spec(topic string) ports.SubscriptionSpec {
	return ports.SubscriptionSpec{Topic: ports.Topic(topic), Group: w.cfg.Group, InFlight: w.cfg.InFlight,
		Retry: ports.RetryPolicy{MaxAttempts: -1}}
}

// SubscribeInitialize makes the group's queue for topic exist, so that
// messages published before the first Subscribe are kept for the group:
// with ports.DeclareGroup where the adapter can declare a group ahead of
// its consumer, otherwise by starting and stopping a subscription.
func (w *Subscriber) SubscribeInitialize(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := ports.DeclareGroup(ctx, w.a, ports.Topic(topic), w.cfg.Group)
	if !errors.Is(err, ports.ErrUnsupported) {
		if err != nil {
			return fmt.Errorf("%s: watermill: declare group %q on %s: %w", w.a.Name(), w.cfg.Group, topic, err)
		}
		return nil
	}
	sub, err := w.a.Subscribe(ctx, w.spec(topic))
	if err != nil {
		return fmt.Errorf("%s: watermill: initialize group %q on %s: %w", w.a.Name(), w.cfg.Group, topic, err)
	}
	return sub.Stop(ctx)
}

// Subscribe starts consuming topic. The returned channel is closed when
// ctx is done or the subscriber is closed; messages not acked by then are
// redelivered by the broker.
func (w *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, fmt.Errorf("%s: watermill subscriber closed: %w", w.a.Name(), ports.ErrClosed)
	}
	w.wg.Add(1)
	w.mu.Unlock()
	sub, err := w.a.Subscribe(ctx, w.spec(topic))
	if err != nil {
		w.wg.Done()
		return nil, fmt.Errorf("%s: watermill subscribe %s: %w", w.a.Name(), topic, err)
	}
	out := make(chan *message.Message)
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		defer w.wg.Done()
		defer cancel()
		select {
		case <-w.closing:
		case <-rctx.Done():
		}
	}()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.run(rctx, sub, out)
	}()
	return out, nil
}

// run hands deliveries to out and settles them as Watermill acks or nacks,
// until ctx is done; then it waits for the outstanding verdicts, flushes
// deferred settlements (ports.Flusher), stops the subscription (which
// acks nothing) and closes out.
func (w *Subscriber) run(ctx context.Context, sub ports.Subscription, out chan<- *message.Message) {
	defer close(out)
	var waiters sync.WaitGroup
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for err := range sub.Errors() { // closed by Stop
			w.report(err)
		}
	}()
	defer func() {
		waiters.Wait()
		sctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		defer cancel()
		if f, ok := sub.(ports.Flusher); ok {
			if err := f.Flush(sctx); err != nil {
				w.report(fmt.Errorf("%s: watermill: flush settlements: %w", w.a.Name(), err))
			}
		}
		if err := sub.Stop(sctx); err != nil {
			w.report(fmt.Errorf("%s: watermill: stop subscription: %w", w.a.Name(), err))
		}
		<-drained
	}()
	slots := make(chan struct{}, w.cfg.InFlight)
	for {
		ds, err := sub.Receive(ctx, w.cfg.InFlight)
		if err != nil {
			return
		}
		for _, d := range ds {
			if d.Err != nil {
				w.poison(sub, d)
				continue
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			msg, done := toWatermill(ctx, d)
			select {
			case out <- msg:
			case <-ctx.Done():
				done()
				return
			}
			waiters.Add(1)
			go func() {
				defer waiters.Done()
				defer func() { <-slots }()
				defer done()
				w.settle(ctx, sub, d, msg)
			}()
		}
	}
}

// errNacked is the requeue reason of a nacked message.
var errNacked = errors.New("nacked by the watermill handler")

// settle waits for Watermill's verdict on msg and carries it out. After
// ctx is done an ack that already happened is still carried out; nothing
// else is.
func (w *Subscriber) settle(ctx context.Context, sub ports.Subscription, d *ports.Delivery, msg *message.Message) {
	var disp ports.Disposition
	select {
	case <-msg.Acked():
		disp = ports.Disposition{Action: ports.Ack}
	case <-msg.Nacked():
		disp = ports.Disposition{Action: ports.Requeue, Reason: errNacked, Delay: w.nackDelay(d)}
	case <-ctx.Done():
		select {
		case <-msg.Acked():
			disp = ports.Disposition{Action: ports.Ack}
		default:
			return // not settled: the broker redelivers it
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := sub.Settle(sctx, []*ports.Delivery{d}, disp); err != nil {
		w.report(fmt.Errorf("%s: watermill %v of %s: %w (the broker redelivers it)", w.a.Name(), disp.Action, d.ID, err))
	}
}

// nackDelay is the requeue delay of a nacked delivery d.
func (w *Subscriber) nackDelay(d *ports.Delivery) time.Duration {
	if w.cfg.NackBackoff == nil {
		return w.cfg.NackDelay
	}
	return w.backoff.Delay(d.RedeliveryCount + 1)
}

// poison dead-letters a delivery whose envelope could not be read, as the
// flow core does: Watermill has no poison outcome, and its handler could
// not judge the message either.
func (w *Subscriber) poison(sub ports.Subscription, d *ports.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	disp := ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poison(d.Err), Attempts: d.RedeliveryCount + 1}
	if err := sub.Settle(ctx, []*ports.Delivery{d}, disp); err != nil {
		w.report(fmt.Errorf("%s: watermill: dead-letter %s (%v): %w (the broker redelivers it)", w.a.Name(), d.ID, d.Err, err))
		return
	}
	w.report(fmt.Errorf("%s: watermill: %s dead-lettered: %w", w.a.Name(), d.ID, d.Err))
}

// toWatermill converts a delivery: its id is the UUID, its headers the
// metadata, with HeaderRedeliveryCount set from the delivery's count on a
// redelivery where the adapter does not carry the header itself. The
// message's context ends when the returned func is called (after the
// settlement) or ctx ends.
func toWatermill(ctx context.Context, d *ports.Delivery) (*message.Message, context.CancelFunc) {
	id := d.ID
	if id == "" {
		id = ports.NewID()
	}
	msg := message.NewMessage(id, d.Payload)
	for _, h := range d.Headers {
		msg.Metadata[h.Name] = h.Value
	}
	if _, ok := msg.Metadata[ports.HeaderRedeliveryCount]; !ok && d.RedeliveryCount > 0 {
		msg.Metadata[ports.HeaderRedeliveryCount] = strconv.Itoa(d.RedeliveryCount)
	}
	mctx, cancel := context.WithCancel(ctx)
	msg.SetContext(mctx)
	return msg, cancel
}

func (w *Subscriber) report(err error) {
	if w.cfg.OnError != nil && err != nil {
		w.cfg.OnError(err)
	}
}

// Close stops every subscription (unacked messages go back to the broker)
// and waits until their channels are closed. It is idempotent and does
// not close the adapter.
func (w *Subscriber) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.closing)
	}
	w.mu.Unlock()
	w.wg.Wait()
	return nil
}
