package rocketmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Subscription is one SimpleConsumer receiving spec.Topic in its consumer
// group. Settle maps dispositions onto the consumer's receipt handles:
//
//   - ACK: AckMessage per delivery (the v5 client acks one handle per RPC;
//     a batch is acked with parallel RPCs).
//   - REQUEUE: ChangeInvisibleDuration(delay): RocketMQ delivers the same
//     message again after delay with DeliveryAttempt+1, so the redelivery
//     count is exact and no copy is published.
//   - DEAD_LETTER: a confirmed publish of kit.DeadLetterCopy to
//     ports.DeadLetterTopic(topic), then AckMessage; a failed publish acks
//     nothing.
//   - no settlement: the message becomes visible again when its invisible
//     duration ends and is redelivered.
//
// Stop never acknowledges: messages received and not settled are released
// at once (ChangeInvisibleDuration 0) so the group's next consumer gets
// them without waiting for the invisible duration.
type Subscription struct {
	a       *Adapter
	spec    ports.SubscriptionSpec
	topic   string // broker name
	group   string // broker name
	sc      rmq.SimpleConsumer
	inbox   *kit.Inbox[*ports.Delivery]
	errs    *kit.Errors
	settler *kit.Settler
	facts   map[string]string
	unclaim func() // releases a Broadcast instance's claim (instance.go)

	mu      sync.Mutex
	out     map[*handle]struct{} // received, not settled
	room    chan struct{}        // closed and replaced when out shrinks
	stopped bool

	cancel  context.CancelFunc
	done    chan struct{} // receive loop ended
	stop    sync.Once
	stopErr error
}

var _ ports.Subscription = (*Subscription)(nil)

// handle is Delivery.Handle: the message view (receipt handle) and the
// settlement claim.
type handle struct {
	claim kit.Claim
	mv    *rmq.MessageView
	s     *Subscription
}

func (h *handle) Claim() *kit.Claim { return &h.claim }

func randomInstance() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func groupFor(spec ports.SubscriptionSpec) string {
	if spec.Mode == ports.Broadcast {
		inst := spec.Instance
		if inst == "" {
			inst = randomInstance()
		}
		if spec.Group != "" {
			return spec.Group + "-" + inst
		}
		return "sluice-broadcast-" + inst
	}
	return spec.Group
}

func newSubscription(ctx context.Context, a *Adapter, spec ports.SubscriptionSpec) (*Subscription, error) {
	topic, err := a.topicName(spec.Topic)
	if err != nil {
		return nil, err
	}
	group, err := a.groupName(spec)
	if err != nil {
		return nil, err
	}
	unclaim, err := claimInstance(a, spec, group)
	if err != nil {
		return nil, err
	}
	sc, err := rmq.NewSimpleConsumer(a.cfg.clientConfig(group),
		rmq.WithSimpleAwaitDuration(a.cfg.await),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		unclaim()
		return nil, fmt.Errorf("rocketmq: consumer for %s: %w", a.cfg.endpoint, err)
	}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.startTimeout)
	defer cancel()
	if err := start(sctx, sc, "consumer group "+group+" on topic "+topic, a.cfg.endpoint); err != nil {
		unclaim()
		return nil, err
	}
	s := &Subscription{
		a: a, spec: spec, topic: topic, group: group, sc: sc, unclaim: unclaim,
		inbox: kit.NewInbox[*ports.Delivery](0),
		errs:  kit.NewErrors(16),
		facts: map[string]string{FactGroup: group},
		out:   make(map[*handle]struct{}),
		room:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	s.settler = kit.NewSettler(settleBroker{s})
	lctx, lcancel := context.WithCancel(context.Background())
	s.cancel = lcancel
	go s.loop(lctx)
	return s, nil
}

// loop long-polls the consumer while fewer than InFlight messages are
// received and unsettled, so no more messages are invisible (their
// invisible duration running) than the pipeline can work on.
func (s *Subscription) loop(ctx context.Context) {
	defer close(s.done)
	backoff := kit.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	failures := 0
	for ctx.Err() == nil {
		s.mu.Lock()
		want := s.spec.InFlight - len(s.out)
		room := s.room
		s.mu.Unlock()
		if want <= 0 {
			select {
			case <-room:
			case <-ctx.Done():
			}
			continue
		}
		mvs, err := s.sc.Receive(ctx, int32(min(want, 32)), s.a.cfg.invisible)
		if ctx.Err() != nil {
			// Messages of a receive cut short stay invisible and come back
			// when their invisible duration ends.
			s.release(mvs)
			return
		}
		if err != nil {
			if notFound(err) || timedOut(err) {
				failures = 0
				continue
			}
			failures++
			s.errs.Report(fmt.Errorf("rocketmq: receive %s in group %s: %w", s.topic, s.group, err))
			select {
			case <-time.After(backoff.Delay(failures)):
			case <-ctx.Done():
			}
			continue
		}
		failures = 0
		if len(mvs) == 0 {
			continue
		}
		now := time.Now()
		ds := make([]*ports.Delivery, 0, len(mvs))
		s.mu.Lock()
		for _, mv := range mvs {
			h := &handle{mv: mv, s: s}
			s.out[h] = struct{}{}
			ds = append(ds, s.delivery(h, now))
		}
		s.mu.Unlock()
		if err := s.inbox.Push(ctx, ds...); err != nil {
			return // stopped: Stop releases everything in out
		}
	}
}

func (s *Subscription) delivery(h *handle, now time.Time) *ports.Delivery {
	mv := h.mv
	hd := headersOf(mv)
	id := hd[ports.HeaderID]
	if id == "" {
		id = mv.GetMessageId()
	}
	attempt := int(mv.GetDeliveryAttempt())
	facts := make(map[string]string, 3)
	facts[FactGroup] = s.group
	facts[FactMessageID] = mv.GetMessageId()
	facts[FactDeliveryAttempt] = strconv.Itoa(attempt)
	return &ports.Delivery{
		Message: ports.Message{
			Topic:   s.spec.Topic,
			Key:     keyOf(mv),
			Payload: mv.GetBody(),
			Headers: hd,
		},
		ID:              id,
		RedeliveryCount: max(attempt-1, 0),
		Facts:           facts,
		ReceivedAt:      now,
		Handle:          h,
	}
}

// Receive returns up to max deliveries, blocking until at least one.
func (s *Subscription) Receive(ctx context.Context, max int) ([]*ports.Delivery, error) {
	if max <= 0 {
		max = 1
	}
	return s.inbox.Receive(ctx, max)
}

// Settle applies d to ds (see Subscription). It returns nil once the
// broker answered; after Stop it returns ports.ErrClosed.
func (s *Subscription) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return ports.ErrClosed
	}
	for _, dv := range ds {
		if h, ok := dv.Handle.(*handle); !ok || h.s != s {
			return &ports.ValueError{Field: "Delivery.Handle", Reason: fmt.Sprintf("of message %q was not received by this subscription", dv.ID)}
		}
	}
	return s.settler.Settle(ctx, ds, d)
}

// Errors reports receive failures (the loop retries with backoff).
func (s *Subscription) Errors() <-chan error { return s.errs.C() }

func (s *Subscription) settled(ds []*ports.Delivery) {
	s.mu.Lock()
	for _, d := range ds {
		delete(s.out, d.Handle.(*handle))
	}
	close(s.room)
	s.room = make(chan struct{})
	s.mu.Unlock()
}

// release makes received messages visible again at once (no ack).
func (s *Subscription) release(mvs []*rmq.MessageView) {
	if len(mvs) == 0 {
		return
	}
	parallel(len(mvs), s.a.cfg.parallelism, func(i int) {
		_ = s.sc.ChangeInvisibleDuration(mvs[i], 0)
	})
}

// Stop ends the subscription: the receive loop stops, every message
// received and not settled is released (made visible to the group again,
// never acknowledged) and the consumer stops. It is idempotent.
func (s *Subscription) Stop(ctx context.Context) error {
	s.stop.Do(func() {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.cancel()
		select {
		case <-s.done:
		case <-ctx.Done():
			s.stopErr = fmt.Errorf("rocketmq: stop %s in group %s: receive loop still running: %w", s.topic, s.group, ctx.Err())
		}
		s.inbox.Close()
		s.mu.Lock()
		var mvs []*rmq.MessageView
		for h := range s.out {
			if st, _ := h.claim.State(); st == kit.Out {
				mvs = append(mvs, h.mv)
			}
		}
		s.out = map[*handle]struct{}{}
		s.mu.Unlock()
		s.release(mvs)
		if err := s.sc.GracefulStop(); err != nil && s.stopErr == nil {
			s.stopErr = fmt.Errorf("rocketmq: stop consumer group %s: %w", s.group, err)
		}
		s.unclaim()
		s.errs.Close()
		s.a.forget(s)
	})
	return s.stopErr
}

var ackBackoff = kit.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2}

// settleBroker is the kit.Broker (and kit.NativeRequeue) of a
// subscription.
type settleBroker struct{ s *Subscription }

var (
	_ kit.Broker        = settleBroker{}
	_ kit.NativeRequeue = settleBroker{}
)

// Ack acknowledges each delivery's receipt handle. A failed AckMessage
// RPC is ambiguous — the proxy may have applied it and lost only the
// answer — so it is retried (with backoff, within twice the request
// timeout): a retry of an applied ack is answered INVALID_RECEIPT_HANDLE,
// which the v5 client reports as success, so a retried Ack returns nil in
// both cases and an error only when the proxy could not be reached at all
// (the message is then redelivered after its invisible duration).
func (b settleBroker) Ack(ctx context.Context, ds []*ports.Delivery) error {
	errs := make([]error, len(ds))
	cfg := &b.s.a.cfg
	budget, cancel := context.WithTimeout(ctx, 2*cfg.requestTimeout)
	defer cancel()
	parallel(len(ds), cfg.parallelism, func(i int) {
		mv := ds[i].Handle.(*handle).mv
		for attempt := 0; ; attempt++ {
			rctx, cancel := context.WithTimeout(budget, cfg.requestTimeout)
			err := b.s.sc.Ack(rctx, mv)
			cancel()
			if err == nil {
				errs[i] = nil
				return
			}
			errs[i] = fmt.Errorf("rocketmq: ack %q in group %s (%d attempts): %w", ds[i].ID, b.s.group, attempt+1, err)
			select {
			case <-budget.Done():
				return
			case <-time.After(ackBackoff.Delay(attempt)):
			}
		}
	})
	err := errors.Join(errs...)
	if err == nil {
		b.s.settled(ds)
	}
	return err
}

func (b settleBroker) Requeue(_ context.Context, ds []*ports.Delivery, delay time.Duration) error {
	errs := make([]error, len(ds))
	parallel(len(ds), b.s.a.cfg.parallelism, func(i int) {
		if err := b.s.sc.ChangeInvisibleDuration(ds[i].Handle.(*handle).mv, delay); err != nil {
			errs[i] = fmt.Errorf("rocketmq: requeue %q in group %s (change invisible duration to %v): %w", ds[i].ID, b.s.group, delay, err)
		}
	})
	err := errors.Join(errs...)
	if err == nil {
		b.s.settled(ds)
	}
	return err
}

func (b settleBroker) Publish(ctx context.Context, msgs []ports.Message) []error {
	now := time.Now()
	for i := range msgs {
		msgs[i].Stamp(now)
	}
	return b.s.a.publish(ctx, msgs)
}
