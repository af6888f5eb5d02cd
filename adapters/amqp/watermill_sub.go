package amqp

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/ports"
)

// WatermillSubscriberConfig configures a WatermillSubscriber. Zero fields
// take the defaults named in their comments.
type WatermillSubscriberConfig struct {
	// Group is the LOAD_BALANCE group: subscribers with the same Group
	// share one durable queue per topic and compete for its messages.
	// Default "watermill".
	Group string
	// InFlight is how many messages a Subscribe hands out before the
	// first of them is acked or nacked (and the broker's prefetch).
	// Default 1, which is what Watermill subscribers usually do: the
	// router then handles one message at a time per subscription.
	InFlight int
	// NackDelay is how long a nacked message waits before it is
	// redelivered (through a delay queue). Default 0: it is requeued at
	// once, at the tail of the queue, with its redelivery count
	// incremented.
	NackDelay time.Duration
}

// WatermillSubscriber is a Watermill message.Subscriber over a sluice
// adapter, so a Watermill router can run on the adapter's settlement
// paths: a message is acked (a delivery-tag ack) only when Watermill
// acks it, a nack requeues it with an exact redelivery count at the tail
// of the queue rather than at its head, headers that are not strings
// (x-death, typed values) are never a reason to reject a message, and
// Close or a cancelled context hand every unacked message back to the
// broker without acking or nacking it. A message whose envelope cannot be
// read is dead-lettered before Watermill sees it. Connection loss is recovered
// underneath; the subscription's errors are not visible to Watermill, so
// they are given to OnError, if set.
type WatermillSubscriber struct {
	a   ports.Adapter
	cfg WatermillSubscriberConfig

	// OnError, if set before the first Subscribe, receives the adapter's
	// asynchronous errors (lost channels, reconnect attempts) and failed
	// settlements. It must not block.
	OnError func(error)

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

// errSubscriberClosed is returned by Subscribe after Close.
var errSubscriberClosed = fmt.Errorf("amqp: watermill subscriber closed: %w", ports.ErrClosed)

var (
	_ message.Subscriber           = (*WatermillSubscriber)(nil)
	_ message.SubscribeInitializer = (*WatermillSubscriber)(nil)
)

// NewWatermillSubscriber returns a subscriber over a (typically an
// *Adapter). Closing the subscriber does not close a.
func NewWatermillSubscriber(a ports.Adapter, cfg WatermillSubscriberConfig) *WatermillSubscriber {
	if cfg.Group == "" {
		cfg.Group = "watermill"
	}
	if cfg.InFlight <= 0 {
		cfg.InFlight = 1
	}
	return &WatermillSubscriber{a: a, cfg: cfg, closing: make(chan struct{})}
}

func (w *WatermillSubscriber) spec(topic string) ports.SubscriptionSpec {
	return ports.SubscriptionSpec{Topic: ports.Topic(topic), Group: w.cfg.Group, InFlight: w.cfg.InFlight,
		Retry: ports.RetryPolicy{MaxAttempts: -1}}
}

// SubscribeInitialize declares the group's queue for topic, so messages
// published before the first Subscribe are kept.
func (w *WatermillSubscriber) SubscribeInitialize(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := w.a.Subscribe(ctx, w.spec(topic))
	if err != nil {
		return err
	}
	return sub.Stop(ctx)
}

// Subscribe starts consuming topic. The returned channel is closed when
// ctx is done or the subscriber is closed; messages not acked by then are
// redelivered by the broker.
func (w *WatermillSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, errSubscriberClosed
	}
	w.wg.Add(1)
	w.mu.Unlock()
	sub, err := w.a.Subscribe(ctx, w.spec(topic))
	if err != nil {
		w.wg.Done()
		return nil, fmt.Errorf("amqp: watermill subscribe %s: %w", topic, err)
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

// run hands deliveries to out and settles them as Watermill acks or
// nacks, until ctx is done; then it stops the subscription (which acks
// nothing) and closes out.
func (w *WatermillSubscriber) run(ctx context.Context, sub ports.Subscription, out chan<- *message.Message) {
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
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sub.Stop(sctx); err != nil {
			w.report(err)
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

// settle waits for Watermill's verdict on msg and carries it out. After
// ctx is done an ack that already happened is still carried out; nothing
// else is.
func (w *WatermillSubscriber) settle(ctx context.Context, sub ports.Subscription, d *ports.Delivery, msg *message.Message) {
	var disp ports.Disposition
	select {
	case <-msg.Acked():
		disp = ports.Disposition{Action: ports.Ack}
	case <-msg.Nacked():
		disp = ports.Disposition{Action: ports.Requeue, Reason: fmt.Errorf("nacked by the watermill handler"), Delay: w.cfg.NackDelay}
	case <-ctx.Done():
		select {
		case <-msg.Acked():
			disp = ports.Disposition{Action: ports.Ack}
		default:
			return // not settled: the broker redelivers it
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sub.Settle(sctx, []*ports.Delivery{d}, disp); err != nil {
		w.report(fmt.Errorf("amqp: watermill %v of %s: %w", disp.Action, d.ID, err))
	}
}

// poison dead-letters a delivery whose envelope could not be read, as the
// flow core does: Watermill has no poison outcome, and its handler could
// not judge the message either.
func (w *WatermillSubscriber) poison(sub ports.Subscription, d *ports.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	disp := ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poison(d.Err), Attempts: d.RedeliveryCount + 1}
	if err := sub.Settle(ctx, []*ports.Delivery{d}, disp); err != nil {
		w.report(fmt.Errorf("amqp: watermill: dead-letter %s (%v): %w", d.ID, d.Err, err))
		return
	}
	w.report(fmt.Errorf("amqp: watermill: %s dead-lettered: %w", d.ID, d.Err))
}

// toWatermill converts a delivery. The message's context ends when the
// returned func is called (after the settlement) or ctx ends.
func toWatermill(ctx context.Context, d *ports.Delivery) (*message.Message, context.CancelFunc) {
	id := d.ID
	if id == "" {
		id = ports.NewID()
	}
	msg := message.NewMessage(id, d.Payload)
	for k, v := range d.Headers {
		msg.Metadata[k] = v
	}
	mctx, cancel := context.WithCancel(ctx)
	msg.SetContext(mctx)
	return msg, cancel
}

func (w *WatermillSubscriber) report(err error) {
	if w.OnError != nil && err != nil {
		w.OnError(err)
	}
}

// Close stops every subscription (unacked messages go back to the broker)
// and waits until their channels are closed. It is idempotent.
func (w *WatermillSubscriber) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.closing)
	}
	w.mu.Unlock()
	w.wg.Wait()
	return nil
}
