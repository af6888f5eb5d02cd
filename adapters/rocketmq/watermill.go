package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/ports"
)

// UUIDProperty is the user property that carries a Watermill message's
// UUID when it differs from the ce-id header.
const UUIDProperty = "_watermill_message_uuid"

// Publisher is a Watermill message.Publisher on RocketMQ: each message is
// sent with the v5 producer and Publish returns once every one is stored
// (confirmed). Metadata becomes user properties; metadata "rocketmq-key"
// becomes the message key.
type Publisher struct{ a *Adapter }

// KeyMetadata is the Watermill metadata entry mapped to the message key.
const KeyMetadata = "rocketmq-key"

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Watermill publisher with its own producer.
func NewPublisher(opts ...Option) (*Publisher, error) {
	a, err := New(opts...)
	if err != nil {
		return nil, err
	}
	return &Publisher{a: a}, nil
}

// Publish sends msgs to topic with confirms.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	pm := make([]ports.Message, len(msgs))
	for i, m := range msgs {
		h := make(ports.Headers, len(m.Metadata)+1)
		maps.Copy(h, m.Metadata)
		key := h[KeyMetadata]
		delete(h, KeyMetadata)
		if m.UUID != "" && h[ports.HeaderID] != m.UUID {
			h[UUIDProperty] = m.UUID
		}
		pm[i] = ports.Message{Topic: sluiceTopic(topic), Key: key, Payload: m.Payload, Headers: h}
	}
	ctx := context.Background()
	if len(msgs) > 0 && msgs[0].Context() != nil {
		ctx = msgs[0].Context()
	}
	errs := p.a.publish(ctx, pm)
	var out []error
	for i, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("message %s: %w", msgs[i].UUID, err))
		}
	}
	return errors.Join(out...)
}

// Close stops the producer.
func (p *Publisher) Close() error { return p.a.Close(context.Background()) }

// SubscriberConfig configures a Watermill Subscriber.
type SubscriberConfig struct {
	// Group is the consumer group of every Subscribe; subscribers of one
	// group share its messages. Empty: a group of its own per Subscriber
	// (each gets every message published after it subscribed).
	Group string
	// NackDelay is how long a nacked message stays invisible before it is
	// redelivered (ChangeInvisibleDuration; default 0: at once).
	NackDelay time.Duration
}

// Subscriber is a Watermill message.Subscriber on RocketMQ: one
// SimpleConsumer per Subscribe, handing out one message at a time; Ack is
// AckMessage, Nack is ChangeInvisibleDuration(NackDelay), and a message
// neither acked nor nacked within the invisible duration is redelivered.
type Subscriber struct {
	a     *Adapter
	cfg   SubscriberConfig
	group string

	mu     sync.Mutex
	closed bool
	stops  []func()
	wg     sync.WaitGroup
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Watermill subscriber.
func NewSubscriber(cfg SubscriberConfig, opts ...Option) (*Subscriber, error) {
	a, err := New(opts...)
	if err != nil {
		return nil, err
	}
	g := cfg.Group
	if g == "" {
		g = "sluice-watermill-" + randomInstance()
	}
	return &Subscriber{a: a, cfg: cfg, group: g}, nil
}

func (s *Subscriber) consumer(ctx context.Context, topic string) (rmq.SimpleConsumer, string, error) {
	name, err := brokerName("topic", topic)
	if err != nil {
		return nil, "", err
	}
	group, err := brokerName("consumer group", s.group)
	if err != nil {
		return nil, "", err
	}
	sc, err := rmq.NewSimpleConsumer(s.a.cfg.clientConfig(group),
		rmq.WithSimpleAwaitDuration(s.a.cfg.await),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{name: rmq.SUB_ALL}))
	if err != nil {
		return nil, "", err
	}
	sctx, cancel := context.WithTimeout(ctx, s.a.cfg.startTimeout)
	defer cancel()
	if err := start(sctx, sc, "consumer group "+group+" on topic "+name, s.a.cfg.endpoint); err != nil {
		return nil, "", err
	}
	return sc, group, nil
}

// SubscribeInitialize makes the subscriber's consumer group exist on topic
// (from the topic's end), so that messages published afterwards and
// before Subscribe are kept for it.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	sc, _, err := s.consumer(context.Background(), topic)
	if err != nil {
		return err
	}
	return sc.GracefulStop()
}

// Subscribe starts a consumer on topic; the channel closes when ctx ends
// or the subscriber closes.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ports.ErrClosed
	}
	s.mu.Unlock()
	sc, group, err := s.consumer(ctx, topic)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		_ = sc.GracefulStop()
		return nil, ports.ErrClosed
	}
	s.stops = append(s.stops, cancel)
	s.wg.Add(1)
	s.mu.Unlock()
	out := make(chan *message.Message)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer func() { _ = sc.GracefulStop() }()
		s.run(lctx, sc, group, out)
	}()
	return out, nil
}

func (s *Subscriber) run(ctx context.Context, sc rmq.SimpleConsumer, group string, out chan<- *message.Message) {
	failures := 0
	for ctx.Err() == nil {
		mvs, err := sc.Receive(ctx, 16, s.a.cfg.invisible)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if notFound(err) || timedOut(err) {
				continue
			}
			failures++
			s.a.cfg.logger.Warn("rocketmq: watermill receive failed", "group", group, "err", err)
			select {
			case <-time.After(ackBackoff.Delay(failures)):
			case <-ctx.Done():
			}
			continue
		}
		failures = 0
		for i, mv := range mvs {
			if !s.handOut(ctx, sc, mv, out) {
				// Stopped: release what was not handed out.
				for _, rest := range mvs[i:] {
					_ = sc.ChangeInvisibleDuration(rest, 0)
				}
				return
			}
		}
	}
}

// handOut gives one message to the consumer and settles it by its Ack or
// Nack. It returns false when ctx ended first.
func (s *Subscriber) handOut(ctx context.Context, sc rmq.SimpleConsumer, mv *rmq.MessageView, out chan<- *message.Message) bool {
	props := mv.GetProperties()
	md := make(message.Metadata, len(props)+1)
	maps.Copy(md, props)
	uuid := md[UUIDProperty]
	delete(md, UUIDProperty)
	if uuid == "" {
		uuid = md[ports.HeaderID]
	}
	if uuid == "" {
		uuid = mv.GetMessageId()
	}
	if k := keyOf(mv); k != "" {
		md[KeyMetadata] = k
	}
	m := message.NewMessage(uuid, mv.GetBody())
	m.Metadata = md
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.SetContext(mctx)
	select {
	case out <- m:
	case <-ctx.Done():
		return false
	}
	select {
	case <-m.Acked():
		ack(ctx, sc, mv, s.a.cfg.requestTimeout)
	case <-m.Nacked():
		_ = sc.ChangeInvisibleDuration(mv, s.cfg.NackDelay)
	case <-ctx.Done():
		_ = sc.ChangeInvisibleDuration(mv, 0)
		return false
	}
	return true
}

// ack acknowledges mv, retrying an ambiguous failure (see settleBroker.Ack).
func ack(ctx context.Context, sc rmq.SimpleConsumer, mv *rmq.MessageView, timeout time.Duration) {
	budget, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		rctx, c := context.WithTimeout(budget, timeout)
		err := sc.Ack(rctx, mv)
		c()
		if err == nil {
			return
		}
		select {
		case <-budget.Done():
			return // redelivered after the invisible duration
		case <-time.After(ackBackoff.Delay(attempt)):
		}
	}
}

// Close stops every subscription and waits for them.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stops := s.stops
	s.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	s.wg.Wait()
	return s.a.Close(context.Background())
}
