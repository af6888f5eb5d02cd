package kafka

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicemq/sluice/ports"
)

// WatermillConfig configures the Watermill subscriber of an adapter.
type WatermillConfig struct {
	// Group is the consumer group of every Subscribe call (LOAD_BALANCE).
	// Empty: each Subscribe gets its own per-instance group (BROADCAST).
	Group string
	// InFlight bounds the messages handed to Watermill and not yet acked
	// or nacked, per Subscribe call. Default 64.
	InFlight int
	// NackDelay is how long a nacked message waits before it is handed out
	// again (it is republished with its redelivery count incremented).
	// Default 0: at once.
	NackDelay time.Duration
	// Logger receives settlement failures and the subscriptions'
	// asynchronous errors (Watermill has no error channel). Default: none.
	Logger watermill.LoggerAdapter
}

// WatermillPublisher returns a Watermill publisher over the adapter's
// confirmed Send. msg.UUID becomes the ce-id header, metadata become
// headers and the metadata value of ports.HeaderPartitionKey becomes the
// Kafka key. Publish returns when every message is confirmed (acks=all).
// Closing it does not close the adapter.
func (a *Adapter) WatermillPublisher() message.Publisher { return &wmPublisher{a: a} }

// WatermillSubscriber returns a Watermill subscriber over the adapter's
// subscriptions: many messages per partition are in flight at once, Ack
// records the offset (the contiguous prefix is committed on the adapter's
// next commit round, and when the subscriber closes) and Nack republishes with the redelivery
// count incremented. A Watermill router can run on it. Closing it stops its
// subscriptions, not the adapter.
func (a *Adapter) WatermillSubscriber(cfg WatermillConfig) message.Subscriber {
	if cfg.InFlight <= 0 {
		cfg.InFlight = ports.DefaultInFlight
	}
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	return &wmSubscriber{a: a, cfg: cfg, closing: make(chan struct{})}
}

type wmPublisher struct {
	a      *Adapter
	mu     sync.Mutex
	closed bool
}

func (p *wmPublisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return ports.ErrClosed
	}
	out := make([]ports.Message, len(msgs))
	for i, m := range msgs {
		h := make(ports.Headers, len(m.Metadata)+1)
		for k, v := range m.Metadata {
			h[k] = v
		}
		h[ports.HeaderID] = m.UUID
		out[i] = ports.Message{Topic: ports.Topic(topic), Key: m.Metadata.Get(ports.HeaderPartitionKey), Payload: m.Payload, Headers: h}
	}
	ctx := context.Background()
	if len(msgs) > 0 && msgs[0].Context() != nil {
		ctx = msgs[0].Context()
	}
	return p.a.Send(ctx, out...)
}

func (p *wmPublisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}

type wmSubscriber struct {
	a   *Adapter
	cfg WatermillConfig

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

func (s *wmSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ports.ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	spec := ports.SubscriptionSpec{Topic: ports.Topic(topic), Group: s.cfg.Group, InFlight: s.cfg.InFlight}
	if spec.Group == "" {
		spec.Mode = ports.Broadcast
	}
	sub, err := s.a.Subscribe(ctx, spec)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	go s.run(ctx, sub, out)
	return out, nil
}

// run feeds out until ctx is done or the subscriber closes, then stops the
// subscription (nothing unacked is committed) and closes out.
func (s *wmSubscriber) run(ctx context.Context, sub ports.Subscription, out chan<- *message.Message) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	slots := make(chan struct{}, s.cfg.InFlight)
	var acks sync.WaitGroup
	defer func() {
		cancel()
		acks.Wait()
		stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		_ = sub.Stop(stopCtx)
		stop()
		close(out)
	}()
	go func() { // log asynchronous errors until Stop closes the channel
		for err := range sub.Errors() {
			s.cfg.Logger.Error("kafka subscription error", err, nil)
		}
	}()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		free := 1
		for free < cap(slots) {
			select {
			case slots <- struct{}{}:
				free++
				continue
			default:
			}
			break
		}
		ds, err := sub.Receive(ctx, free)
		for range free - len(ds) {
			<-slots
		}
		if err != nil {
			return
		}
		for i, d := range ds {
			m := message.NewMessage(d.ID, d.Payload)
			for k, v := range d.Headers {
				m.Metadata.Set(k, v)
			}
			mctx, mcancel := context.WithCancel(ctx) // ends when m is settled
			m.SetContext(mctx)
			select {
			case out <- m:
			case <-ctx.Done():
				mcancel()
				for range len(ds) - i {
					<-slots
				}
				return // unsent deliveries stay unsettled: redelivered
			}
			acks.Add(1)
			go s.settle(ctx, sub, d, m, mcancel, slots, &acks)
		}
	}
}

// settle waits for Watermill's Ack or Nack of m and settles d accordingly.
func (s *wmSubscriber) settle(ctx context.Context, sub ports.Subscription, d *ports.Delivery, m *message.Message, done context.CancelFunc, slots <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	defer func() { <-slots }()
	defer done()
	var disp ports.Disposition
	select {
	case <-m.Acked():
		disp = ports.Disposition{Action: ports.Ack}
	case <-m.Nacked():
		disp = ports.Disposition{Action: ports.Requeue, Reason: errors.New("nacked by the Watermill handler"), Delay: s.cfg.NackDelay}
	case <-ctx.Done():
		return // neither: no settlement, the broker redelivers
	}
	if err := sub.Settle(ctx, []*ports.Delivery{d}, disp); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Error("kafka settlement failed; the message will be redelivered", err, watermill.LogFields{"action": disp.Action.String(), "message_uuid": d.ID})
	}
}

func (s *wmSubscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
