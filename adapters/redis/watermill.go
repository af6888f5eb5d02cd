package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/ports"
)

// WatermillPublisher is a Watermill message.Publisher over a sluice sender
// (typically an *Adapter): Publish returns when Redis confirmed every
// message at the adapter's durability level. The message UUID travels as
// the envelope id (HeaderID), the metadata as headers. With an Adapter made
// with RawStreamNames and WireWatermill, watermill-redisstream subscribers
// read what it publishes.
type WatermillPublisher struct {
	s      ports.Sender
	closed atomic.Bool
}

var _ message.Publisher = (*WatermillPublisher)(nil)

// NewWatermillPublisher returns a publisher over s. Closing the publisher
// does not close s.
func NewWatermillPublisher(s ports.Sender) *WatermillPublisher { return &WatermillPublisher{s: s} }

// Publish sends msgs to topic, confirmed. It returns the joined
// *ports.SendError of every message Redis did not confirm.
func (p *WatermillPublisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ports.ErrClosed
	}
	out := make([]ports.Message, len(msgs))
	for i, m := range msgs {
		h := make(ports.Headers, len(m.Metadata)+1)
		for k, v := range m.Metadata {
			h[k] = v
		}
		if m.UUID != "" {
			h[ports.HeaderID] = m.UUID
		}
		out[i] = ports.Message{Topic: ports.Topic(topic), Payload: m.Payload, Headers: h}
	}
	return p.s.Send(context.Background(), out...)
}

// Close makes later Publish calls fail with ports.ErrClosed. Idempotent.
func (p *WatermillPublisher) Close() error {
	p.closed.Store(true)
	return nil
}

// WatermillSubscriberConfig configures a WatermillSubscriber.
type WatermillSubscriberConfig struct {
	// Group is the consumer group: subscribers with the same Group
	// compete for a topic's messages. Default "watermill".
	Group string
	// InFlight is how many messages a Subscribe hands out before the first
	// is acked or nacked (XREADGROUP COUNT). Default 1.
	InFlight int
	// NackDelay is how long a nacked message waits before it is
	// redelivered (its idle time in the pending list is shaped so that
	// XAUTOCLAIM hands it out after NackDelay). Default 0: at once.
	NackDelay time.Duration
}

// WatermillSubscriber is a Watermill message.Subscriber over a sluice
// adapter: an ack is an XACK, a nack leaves the entry pending and has it
// claimed again with its delivery counted (unlike watermill-redisstream,
// whose nack hands the same entry to the handler in-process and changes
// nothing in Redis), Close or a cancelled context leave every unacked
// message pending for the group. A message whose envelope cannot be read
// is dead-lettered to "<topic>.dlq" before Watermill sees it. The
// subscription's asynchronous errors go to OnError, if set.
type WatermillSubscriber struct {
	a   ports.Adapter
	cfg WatermillSubscriberConfig

	// OnError, if set before the first Subscribe, receives asynchronous
	// errors and failed settlements. It must not block.
	OnError func(error)

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

var (
	_ message.Subscriber           = (*WatermillSubscriber)(nil)
	_ message.SubscribeInitializer = (*WatermillSubscriber)(nil)
)

// NewWatermillSubscriber returns a subscriber over a. Closing the
// subscriber does not close a.
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

// SubscribeInitialize creates the group for topic, so messages published
// before the first Subscribe are kept for it.
func (w *WatermillSubscriber) SubscribeInitialize(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := w.a.Subscribe(ctx, w.spec(topic))
	if err != nil {
		return err
	}
	return sub.Stop(ctx)
}

// Subscribe starts consuming topic. The channel is closed when ctx is done
// or the subscriber is closed; unacked messages stay pending for the group.
func (w *WatermillSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, fmt.Errorf("redis: watermill subscriber closed: %w", ports.ErrClosed)
	}
	w.wg.Add(1)
	w.mu.Unlock()
	sub, err := w.a.Subscribe(ctx, w.spec(topic))
	if err != nil {
		w.wg.Done()
		return nil, fmt.Errorf("redis: watermill subscribe %s: %w", topic, err)
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

func (w *WatermillSubscriber) run(ctx context.Context, sub ports.Subscription, out chan<- *message.Message) {
	defer close(out)
	var waiters sync.WaitGroup
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for err := range sub.Errors() {
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
			msg := message.NewMessage(d.ID, d.Payload)
			for k, v := range d.Headers {
				msg.Metadata[k] = v
			}
			mctx, done := context.WithCancel(ctx)
			msg.SetContext(mctx)
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
			return // not settled: it stays pending for the group
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sub.Settle(sctx, []*ports.Delivery{d}, disp); err != nil {
		w.report(fmt.Errorf("redis: watermill %v of %s: %w", disp.Action, d.ID, err))
	}
}

func (w *WatermillSubscriber) poison(sub ports.Subscription, d *ports.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	disp := ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poison(d.Err), Attempts: d.RedeliveryCount + 1}
	if err := sub.Settle(ctx, []*ports.Delivery{d}, disp); err != nil {
		w.report(fmt.Errorf("redis: watermill: dead-letter %s (%v): %w", d.ID, d.Err, err))
		return
	}
	w.report(fmt.Errorf("redis: watermill: %s dead-lettered: %w", d.ID, d.Err))
}

func (w *WatermillSubscriber) report(err error) {
	if w.OnError != nil && err != nil {
		w.OnError(err)
	}
}

// Close stops every subscription and waits until their channels are
// closed. Idempotent.
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
