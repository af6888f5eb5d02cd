package mqtt

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

// WatermillPublisher returns a Watermill publisher over the adapter's
// sender connection, so the adapter can sit behind a Watermill router.
// Publish sends every message at QoS 1 to the logical topic and returns
// after all PUBACKs (an unconfirmed publish is an error, as for Send). A
// message's UUID becomes HeaderID and its metadata the other headers.
// Closing the publisher does not close the adapter.
func (a *Adapter) WatermillPublisher() message.Publisher { return wmPublisher{a: a} }

type wmPublisher struct{ a *Adapter }

func (p wmPublisher) Publish(topic string, msgs ...*message.Message) error {
	if len(msgs) == 0 {
		return nil
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
		out[i] = ports.Message{Topic: ports.Topic(topic), Key: h[ports.HeaderPartitionKey], Payload: m.Payload, Headers: h}
	}
	return p.a.Send(msgs[0].Context(), out...)
}

func (p wmPublisher) Close() error { return nil }

// WatermillConfig configures WatermillSubscriber. The zero value consumes
// as a LoadBalance group named "watermill".
type WatermillConfig struct {
	// Spec is the subscription template; Subscribe fills Topic. Default
	// Mode LoadBalance with Group "watermill"; see ports.SubscriptionSpec
	// for the other defaults.
	Spec ports.SubscriptionSpec
	// NackDelay is the Requeue delay for a nacked message. Default 0 (the
	// message is handed out again at once, with its redelivery count + 1).
	NackDelay time.Duration
}

// WatermillSubscriber returns a Watermill subscriber over this adapter.
// Each Subscribe starts one adapter subscription and hands its deliveries
// out one at a time, as Watermill expects: the next message comes after
// the previous one was acked (PUBACK) or nacked (local redelivery after
// NackDelay). Metadata carries the headers and HeaderRedeliveryCount.
// Close stops every subscription without acknowledging what was not acked.
func (a *Adapter) WatermillSubscriber(cfg WatermillConfig) message.Subscriber {
	if cfg.Spec.Group == "" && cfg.Spec.Mode == ports.LoadBalance {
		cfg.Spec.Group = "watermill"
	}
	return &wmSubscriber{a: a, cfg: cfg, closing: make(chan struct{})}
}

type wmSubscriber struct {
	a   *Adapter
	cfg WatermillConfig

	mu      sync.Mutex
	subs    []ports.Subscription
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

func (s *wmSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	spec := s.cfg.Spec
	spec.Topic = ports.Topic(topic)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("mqtt: watermill subscribe: %w", ports.ErrClosed)
	}
	s.mu.Unlock()
	sub, err := s.a.Subscribe(ctx, spec)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = sub.Stop(context.Background())
		return nil, fmt.Errorf("mqtt: watermill subscribe: %w", ports.ErrClosed)
	}
	s.subs = append(s.subs, sub)
	s.wg.Add(1)
	s.mu.Unlock()
	out := make(chan *message.Message)
	go s.run(ctx, sub, out)
	return out, nil
}

// run hands deliveries out one at a time and settles each from its
// Watermill ack or nack. It ends when ctx is done or Close is called.
func (s *wmSubscriber) run(ctx context.Context, sub ports.Subscription, out chan<- *message.Message) {
	defer s.wg.Done()
	defer close(out)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		ds, err := sub.Receive(ctx, 1)
		if err != nil {
			return
		}
		d := ds[0]
		m := message.NewMessage(d.ID, d.Payload)
		for k, v := range d.Headers {
			m.Metadata.Set(k, v)
		}
		m.Metadata.Set(ports.HeaderRedeliveryCount, strconv.Itoa(d.RedeliveryCount))
		m.SetContext(ctx)
		select {
		case out <- m:
		case <-ctx.Done():
			return // not handed out: never settled, the broker redelivers
		}
		var disp ports.Disposition
		select {
		case <-m.Acked():
			disp = ports.Disposition{Action: ports.Ack}
		case <-m.Nacked():
			disp = ports.Disposition{Action: ports.Requeue, Delay: s.cfg.NackDelay, Reason: errors.New("nacked by the watermill handler")}
		case <-ctx.Done():
			return // no outcome: no settlement
		}
		if err := sub.Settle(ctx, ds, disp); err != nil && !errors.Is(err, ports.ErrClosed) {
			s.a.opts.Logger.Warn("sluice mqtt: watermill settle", "id", d.ID, "action", disp.Action.String(), "error", err)
		}
	}
}

// Close stops every subscription (acknowledging nothing) and waits for
// the delivery goroutines. Idempotent.
func (s *wmSubscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	subs := s.subs
	s.mu.Unlock()
	s.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, sub := range subs {
		errs = append(errs, sub.Stop(ctx))
	}
	return errors.Join(errs...)
}
