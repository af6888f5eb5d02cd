package rocketmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
//   - no settlement: while the subscription runs, the message's invisible
//     duration is renewed (see lease) up to WithMaxLease after it was
//     received; then it becomes visible again and is redelivered.
//
// A message in flight has its invisibility renewed before it ends, so a
// handler slower than the invisible duration does not see its message
// delivered to another consumer of the group meanwhile (a duplicate the
// guarantee allows but a user does not expect of a live consumer).
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
	leased  chan struct{} // lease loop ended
	stop    sync.Once
	stopErr error
}

var _ ports.Subscription = (*Subscription)(nil)

// handle is Delivery.Handle: the message view (receipt handle) and the
// settlement claim.
type handle struct {
	claim    kit.Claim
	s        *Subscription
	received time.Time // when the receive that brought it was sent

	// mu serialises the RPCs on mv: ChangeInvisibleDuration replaces its
	// receipt handle, which Ack and a later change then use.
	mu sync.Mutex
	mv *rmq.MessageView
	// due is when its invisibility ends (UnixNano), read by the lease
	// scan without waiting for an RPC under mu.
	due atomic.Int64
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
		inbox:  kit.NewInbox[*ports.Delivery](0),
		errs:   kit.NewErrors(16),
		facts:  map[string]string{FactGroup: group},
		out:    make(map[*handle]struct{}),
		room:   make(chan struct{}),
		done:   make(chan struct{}),
		leased: make(chan struct{}),
	}
	s.settler = kit.NewSettler(settleBroker{s})
	lctx, lcancel := context.WithCancel(context.Background())
	s.cancel = lcancel
	go s.loop(lctx)
	go s.lease(lctx)
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
		sent := time.Now() // the invisibility starts after this
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
			h := &handle{mv: mv, s: s, received: sent}
			h.due.Store(sent.Add(s.a.cfg.invisible).UnixNano())
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
	id, src := ports.IdentityFromHeaders(hd)
	if id == "" {
		if id = mv.GetMessageId(); id != "" {
			src = ports.IDBroker
		}
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
		IDSource:        src,
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

// lease renews the invisibility of the messages in flight: every sixth of
// the invisible duration, each message received, not being settled, whose
// invisibility ends within two thirds of the duration and that was
// received less than WithMaxLease ago gets a fresh invisible duration. A
// renewal is thus sent at least half the duration before the invisibility
// would end. A failed renewal is reported on Errors: the message may then
// be delivered again (at-least-once).
func (s *Subscription) lease(ctx context.Context) {
	defer close(s.leased)
	inv, maxLease := s.a.cfg.invisible, s.a.cfg.maxLease
	if maxLease <= 0 {
		return
	}
	t := time.NewTicker(max(inv/6, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var due []*handle
		s.mu.Lock()
		for h := range s.out {
			if st, _ := h.claim.State(); st != kit.Out || now.Sub(h.received) >= maxLease {
				continue
			}
			if time.Duration(h.due.Load()-now.UnixNano()) < 2*inv/3 {
				due = append(due, h)
			}
		}
		s.mu.Unlock()
		parallel(len(due), s.a.cfg.parallelism, func(i int) { s.renew(ctx, due[i], inv) })
	}
}

// renew gives h a fresh invisible duration unless it is being settled.
func (s *Subscription) renew(ctx context.Context, h *handle, inv time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st, _ := h.claim.State(); st != kit.Out || ctx.Err() != nil {
		return
	}
	sent := time.Now()
	if err := s.sc.ChangeInvisibleDuration(h.mv, inv); err != nil {
		if st, _ := h.claim.State(); st == kit.Out && ctx.Err() == nil {
			s.errs.Report(fmt.Errorf("rocketmq: renewing the invisible duration of %q in group %s (it may be delivered again): %w", h.mv.GetMessageId(), s.group, err))
		}
		return
	}
	h.due.Store(sent.Add(inv).UnixNano())
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
		if s.stopErr == nil {
			<-s.leased // a renewal's RPC is bounded by the request timeout
		}
		s.inbox.Close()
		s.mu.Lock()
		var hs []*handle
		for h := range s.out {
			if st, _ := h.claim.State(); st == kit.Out {
				hs = append(hs, h)
			}
		}
		s.out = map[*handle]struct{}{}
		s.mu.Unlock()
		parallel(len(hs), s.a.cfg.parallelism, func(i int) {
			hs[i].mu.Lock()
			defer hs[i].mu.Unlock()
			_ = s.sc.ChangeInvisibleDuration(hs[i].mv, 0)
		})
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
		h := ds[i].Handle.(*handle)
		h.mu.Lock()
		defer h.mu.Unlock()
		mv := h.mv
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
		h := ds[i].Handle.(*handle)
		h.mu.Lock()
		defer h.mu.Unlock()
		if err := b.s.sc.ChangeInvisibleDuration(h.mv, delay); err != nil {
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
