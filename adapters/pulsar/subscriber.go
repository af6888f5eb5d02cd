package pulsar

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	pulsarclient "github.com/apache/pulsar-client-go/pulsar"

	"github.com/sluicemq/sluice/ports"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// SubscriptionName is the Pulsar subscription every Subscribe call
	// joins. Required.
	SubscriptionName string
	// Consumer is the template of the consumer options. Subscribe sets
	// Topic and SubscriptionName, and forces AckWithResponse so that an
	// acknowledgement failure is seen (and logged). Its zero value is the
	// client's defaults: an Exclusive subscription starting at the latest
	// message, a 1000-message receiver queue, a one-minute nack delay.
	Consumer pulsarclient.ConsumerOptions
	// DecisionWait bounds how long a stopping Subscribe loop (Close, or
	// its context cancelled) waits for the Ack or Nack of the message it
	// has handed out. Watermill's router closes its subscribers while the
	// handlers still run, and acks a message after its handler returned;
	// without the wait that ack would be dropped and the handled message
	// redelivered. Zero means DefaultDecisionWait; negative, no wait.
	DecisionWait time.Duration
}

// DefaultDecisionWait is SubscriberConfig.DecisionWait's default.
const DefaultDecisionWait = 5 * time.Second

// Subscriber is a Watermill message.Subscriber over a Pulsar client.
//
// Each Subscribe call creates one consumer and hands its messages out one
// at a time: the next message comes after the previous one was acked or
// nacked. Ack() acknowledges the message id on the broker (a failure is
// logged: Watermill's Ack cannot return it); Nack() negatively acknowledges
// it, so the broker redelivers it after the consumer's nack delay with its
// redelivery count increased. A message whose NotBeforeProperty time has
// not come is held until then. Cancelling the Subscribe context or Close
// waits up to SubscriberConfig.DecisionWait for the message in hand to be
// acked or nacked, then closes the consumer; a message still undecided is
// left unsettled, and the broker redelivers it.
//
// Metadata are the message properties, plus KeyMetadata for the key; the
// UUID is UUIDProperty, else "ce-id", else the Pulsar message id.
type Subscriber struct {
	client pulsarclient.Client
	cfg    SubscriberConfig
	wait   time.Duration // DecisionWait resolved: 0 means no wait
	logger watermill.LoggerAdapter

	closeOnce sync.Once
	closing   chan struct{}
	wg        sync.WaitGroup
}

// NewSubscriber returns a Subscriber over client. The caller keeps owning
// client. logger may be nil (no logging).
func NewSubscriber(client pulsarclient.Client, cfg SubscriberConfig, logger watermill.LoggerAdapter) (*Subscriber, error) {
	if client == nil {
		return nil, &ports.ValueError{Field: "pulsar.NewSubscriber", Reason: "client must not be nil"}
	}
	if cfg.SubscriptionName == "" {
		return nil, &ports.ValueError{Field: "SubscriberConfig.SubscriptionName", Reason: "is required"}
	}
	if logger == nil {
		logger = watermill.NopLogger{}
	}
	wait := cfg.DecisionWait
	switch {
	case wait == 0:
		wait = DefaultDecisionWait
	case wait < 0:
		wait = 0
	}
	return &Subscriber{client: client, cfg: cfg, wait: wait, logger: logger, closing: make(chan struct{})}, nil
}

// Subscribe implements message.Subscriber; topic is a Pulsar topic name.
// The channel is closed when ctx is done or the Subscriber is closed.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	select {
	case <-s.closing:
		return nil, ports.ErrClosed
	default:
	}
	opts := s.cfg.Consumer
	opts.Topic = topic
	opts.SubscriptionName = s.cfg.SubscriptionName
	opts.AckWithResponse = true
	consumer, err := s.client.Subscribe(opts)
	if err != nil {
		return nil, fmt.Errorf("pulsar: subscribe %s to %s: %w", opts.SubscriptionName, topic, err)
	}
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer consumer.Close()
		s.consume(ctx, consumer, out)
	}()
	return out, nil
}

// consume hands messages out one at a time and settles each as told.
func (s *Subscriber) consume(ctx context.Context, consumer pulsarclient.Consumer, out chan<- *message.Message) {
	fields := watermill.LogFields{"subscription": consumer.Subscription()}
	for {
		var pm pulsarclient.Message
		select {
		case cm, ok := <-consumer.Chan():
			if !ok {
				return
			}
			pm = cm.Message
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		}
		if !s.waitNotBefore(ctx, pm) {
			return
		}
		wm := toMessage(ctx, pm)
		select {
		case out <- wm:
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		}
		ack := func() {
			if err := consumer.AckID(pm.ID()); err != nil {
				s.logger.Error("pulsar ack failed; the broker will redeliver", err, fields.Add(watermill.LogFields{"uuid": wm.UUID}))
			}
		}
		select {
		case <-wm.Acked():
			ack()
		case <-wm.Nacked():
			consumer.Nack(pm)
		case <-ctx.Done():
			s.settleDecided(wm, pm, consumer, ack)
			return
		case <-s.closing:
			s.settleDecided(wm, pm, consumer, ack)
			return
		}
	}
}

// settleDecided forwards the ack or nack of the message in hand as the
// subscriber stops: one given already (select picks at random among ready
// cases), or one given within DecisionWait (the router acks after the
// handler returns, and it closes its subscribers before that).
func (s *Subscriber) settleDecided(wm *message.Message, pm pulsarclient.Message, consumer pulsarclient.Consumer, ack func()) {
	select {
	case <-wm.Acked():
		ack()
		return
	case <-wm.Nacked():
		consumer.Nack(pm)
		return
	default:
	}
	if s.wait <= 0 {
		return
	}
	if undecidedAtStop != nil {
		undecidedAtStop()
	}
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case <-wm.Acked():
		ack()
	case <-wm.Nacked():
		consumer.Nack(pm)
	case <-t.C:
	}
}

// undecidedAtStop, when set (by the package's tests), is called when a
// stopping Subscribe loop starts waiting for the decision.
var undecidedAtStop func()

// waitNotBefore waits until pm's not-before time; false when stopping.
func (s *Subscriber) waitNotBefore(ctx context.Context, pm pulsarclient.Message) bool {
	at, err := notBefore(pm.Properties())
	if err != nil {
		s.logger.Error("pulsar message has a malformed not-before guard; delivering now", err, nil)
		return true
	}
	wait := time.Until(at)
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}

// toMessage maps a received Pulsar message onto a Watermill message.
func toMessage(ctx context.Context, pm pulsarclient.Message) *message.Message {
	wm := message.NewMessage(messageUUID(pm), pm.Payload())
	for k, v := range pm.Properties() {
		if k != UUIDProperty && k != NotBeforeProperty {
			wm.Metadata[k] = v
		}
	}
	if k := pm.Key(); k != "" {
		wm.Metadata[KeyMetadata] = k
	}
	wm.SetContext(ctx)
	return wm
}

// Close stops every Subscribe loop and closes their consumers, leaving
// unacknowledged messages to the broker. It is idempotent.
func (s *Subscriber) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.wg.Wait()
	return nil
}

var _ message.Subscriber = (*Subscriber)(nil)
