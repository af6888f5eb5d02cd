package activemq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/ports"
)

// WatermillPublisher is a Watermill message.Publisher over the adapter:
// Publish returns once the broker confirmed every message (the COMMIT
// receipt of a Send). A Watermill topic is a sluice logical topic; the
// UUID travels as HeaderID and the metadata as headers, so sluice
// consumers and WatermillSubscriber see the same message.
type WatermillPublisher struct {
	a      *Adapter
	closed atomic.Bool
}

var _ message.Publisher = (*WatermillPublisher)(nil)

// NewWatermillPublisher returns a publisher over a. Closing it does not
// close a.
func NewWatermillPublisher(a *Adapter) *WatermillPublisher { return &WatermillPublisher{a: a} }

// Publish sends msgs to topic in one confirmed Send. It returns the
// joined *ports.SendError of every message the broker did not confirm.
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
		if h[ports.HeaderID] == "" {
			h[ports.HeaderID] = m.UUID
		}
		out[i] = ports.Message{Topic: ports.Topic(topic), Payload: m.Payload, Headers: h}
	}
	return p.a.Send(context.Background(), out...)
}

// Close makes later Publish calls fail with ports.ErrClosed.
func (p *WatermillPublisher) Close() error {
	p.closed.Store(true)
	return nil
}

// WatermillSubscriberConfig configures a WatermillSubscriber.
type WatermillSubscriberConfig struct {
	// Group is the LOAD_BALANCE group: subscribers with the same Group
	// share the group's virtual-topic queue. Default "watermill".
	Group string
	// InFlight is the prefetch and how many messages a Subscribe hands out
	// unacknowledged. Default 1 (a Watermill router handles one message
	// at a time per subscription).
	InFlight int
	// NackDelay delays the redelivery of a nacked message
	// (AMQ_SCHEDULED_DELAY). Default 0: requeued at once, at the tail of
	// the queue, with its redelivery count incremented.
	NackDelay time.Duration
	// OnError, if set, receives the subscriptions' asynchronous errors
	// and failed settlements (Watermill has no channel for them). It must
	// not block.
	OnError func(error)
}

// WatermillSubscriber is a Watermill message.Subscriber over the adapter:
// a message is acknowledged only when Watermill acks it, a nack requeues
// it (a STOMP transaction: the copy with count+1, the ack of the
// original), and Close or a cancelled context hand every unacknowledged
// message back to the broker.
type WatermillSubscriber struct {
	a   *Adapter
	cfg WatermillSubscriberConfig

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

var (
	_ message.Subscriber           = (*WatermillSubscriber)(nil)
	_ message.SubscribeInitializer = (*WatermillSubscriber)(nil)
)

// NewWatermillSubscriber returns a subscriber over a. Closing it does not
// close a.
func NewWatermillSubscriber(a *Adapter, cfg WatermillSubscriberConfig) *WatermillSubscriber {
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

// SubscribeInitialize creates the group's queue for topic, so messages
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

// Subscribe consumes topic. The channel is closed when ctx is done or the
// subscriber is closed; what was not acked by then is redelivered.
func (w *WatermillSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, fmt.Errorf("activemq: watermill subscriber closed: %w", ports.ErrClosed)
	}
	w.wg.Add(1)
	w.mu.Unlock()
	sub, err := w.a.Subscribe(ctx, w.spec(topic))
	if err != nil {
		w.wg.Done()
		return nil, fmt.Errorf("activemq: watermill subscribe %s: %w", topic, err)
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

// run hands deliveries to out and settles them as Watermill decides,
// until ctx is done; then it stops the subscription and closes out.
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
		if f, ok := sub.(ports.Flusher); ok {
			w.report(f.Flush(sctx))
		}
		w.report(sub.Stop(sctx))
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
				w.settleOne(sub, d, ports.Disposition{Action: ports.DeadLetter, Reason: ports.Poison(d.Err), Attempts: d.RedeliveryCount + 1})
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
				var disp ports.Disposition
				select {
				case <-msg.Acked():
					disp = ports.Disposition{Action: ports.Ack}
				case <-msg.Nacked():
					disp = ports.Disposition{Action: ports.Requeue, Reason: errors.New("nacked by the watermill handler"), Delay: w.cfg.NackDelay}
				case <-ctx.Done():
					select {
					case <-msg.Acked():
						disp = ports.Disposition{Action: ports.Ack}
					default:
						return // not settled: the broker redelivers it
					}
				}
				w.settleOne(sub, d, disp)
			}()
		}
	}
}

func (w *WatermillSubscriber) settleOne(sub ports.Subscription, d *ports.Delivery, disp ports.Disposition) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sub.Settle(ctx, []*ports.Delivery{d}, disp); err != nil {
		w.report(fmt.Errorf("activemq: watermill %v of %s: %w", disp.Action, d.ID, err))
	}
}

func (w *WatermillSubscriber) report(err error) {
	if w.cfg.OnError != nil && err != nil {
		w.cfg.OnError(err)
	}
}

// Close stops every subscription (unacknowledged messages go back to the
// broker) and waits until their channels are closed. It is idempotent.
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
