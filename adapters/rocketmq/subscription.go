package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Fact names a delivery carries in Delivery.Facts.
const (
	FactMessageID       = "rocketmq.message-id"
	FactGroup           = "rocketmq.group"
	FactDeliveryAttempt = "rocketmq.delivery-attempt"
)

// subscription is one SimpleConsumer receiving spec.Topic in its consumer
// group. The portable layer settles through it:
//
//   - ACK: AckMessage per receipt handle (the v5 client acks one handle
//     per RPC; a round is acked with parallel RPCs).
//   - REQUEUE: ChangeInvisibleDuration(delay): RocketMQ delivers the same
//     message again after delay with DeliveryAttempt+1, so the redelivery
//     count is exact and no copy is published.
//   - DEAD_LETTER: the portable layer's confirmed copy to
//     ports.DeadLetterTopic(topic), then AckMessage.
//   - no settlement: while the subscription runs, the message's invisible
//     duration is renewed (see lease) up to Options.MaxLease after it was
//     received; then it becomes visible again and is redelivered.
type subscription struct {
	c       *conn
	spec    ports.SubscriptionSpec
	sc      rmq.SimpleConsumer
	group   string
	unclaim func() // releases a Broadcast instance's claim (instance.go)
	recs    []driver.Record

	mu  sync.Mutex
	out map[*handle]struct{} // received, not being settled: renewed, released by Close

	timers      *kit.Periodic // the lease renewal
	kit.Reports               // a failed renewal goes to Errors
}

var (
	_ driver.Requeuer = (*subscription)(nil)
	_ driver.Reporter = (*subscription)(nil)
)

// handle is a record's Handle: its message view (receipt handle).
type handle struct {
	received time.Time // when the receive that brought it was sent

	// mu serialises the RPCs on mv: ChangeInvisibleDuration replaces its
	// receipt handle, which Ack and a later change then use.
	mu sync.Mutex
	mv *rmq.MessageView
	// due is when its invisibility ends (UnixNano), read by the lease
	// scan without waiting for an RPC under mu.
	due atomic.Int64
	// settling is set once the portable layer settles the record: it is
	// no longer renewed.
	settling atomic.Bool
}

func newSubscription(c *conn, spec ports.SubscriptionSpec, sc rmq.SimpleConsumer, group string, unclaim func()) *subscription {
	s := &subscription{c: c, spec: spec, sc: sc, group: group, unclaim: unclaim, out: map[*handle]struct{}{}, timers: kit.NewPeriodic()}
	if inv := c.o.InvisibleDuration; c.o.MaxLease > 0 {
		s.timers.Every(max(inv/6, time.Millisecond), s.lease)
	}
	return s
}

// ReceiveBatch long-polls the consumer for up to max messages (at most 32,
// RocketMQ's batch) until at least one arrives. A poll that ends without
// a message is polled again. On ctx cancellation a receive under way is
// cut short by the client without its messages: they stay invisible and
// come back when their invisible duration ends.
func (s *subscription) ReceiveBatch(ctx context.Context, max int) ([]driver.Record, error) {
	for {
		sent := time.Now() // the invisibility starts after this
		mvs, err := s.sc.Receive(ctx, int32(min(max, 32)), s.c.o.InvisibleDuration)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if emptyPoll(err) {
				continue
			}
			return nil, fmt.Errorf("rocketmq: receive %s in group %s: %w", s.spec.Topic, s.group, err)
		}
		if len(mvs) > 0 {
			return s.records(mvs, sent), nil
		}
	}
}

// emptyPoll reports whether a receive ended with no message:
// MESSAGE_NOT_FOUND, or the client's own long-poll deadline, which it
// reports as a bare "[error] CODE=DEADLINE_EXCEEDED" of no type.
func emptyPoll(err error) bool {
	var st *rmq.ErrRpcStatus
	if errors.As(err, &st) {
		return st.Code == int32(v2.Code_MESSAGE_NOT_FOUND)
	}
	return strings.Contains(err.Error(), "CODE=DEADLINE_EXCEEDED")
}

// records turns message views into records, each counted in out.
func (s *subscription) records(mvs []*rmq.MessageView, sent time.Time) []driver.Record {
	now := time.Now()
	recs := s.recs[:0]
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, mv := range mvs {
		h := &handle{mv: mv, received: sent}
		h.due.Store(sent.Add(s.c.o.InvisibleDuration).UnixNano())
		s.out[h] = struct{}{}
		attempt := int(mv.GetDeliveryAttempt())
		var key string
		if k := mv.GetKeys(); len(k) > 0 {
			key = k[0]
		}
		recs = append(recs, driver.Record{
			Message:         ports.Message{Topic: s.spec.Topic, Key: key, Payload: mv.GetBody(), Headers: ports.HeadersFromMap(mv.GetProperties())},
			BrokerID:        mv.GetMessageId(),
			RedeliveryCount: max(attempt-1, 0),
			Facts:           ports.NewFacts(&viewFacts{group: s.group, id: mv.GetMessageId(), attempt: attempt}),
			ReceivedAt:      now,
			Handle:          h,
		})
	}
	s.recs = recs
	return recs
}

// take removes handles from out: they are being settled and are no longer
// renewed, whatever the outcome (a record whose settlement failed comes
// back when its invisibility ends).
func (s *subscription) take(handles []any) []*handle {
	hs := make([]*handle, len(handles))
	s.mu.Lock()
	for i, x := range handles {
		hs[i] = x.(*handle)
		hs[i].settling.Store(true)
		delete(s.out, hs[i])
	}
	s.mu.Unlock()
	return hs
}

var ackBackoff = kit.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2}

// SendAcks acknowledges each handle's receipt with one AckMessage RPC, at
// most Options.Parallelism at once. A failed AckMessage is ambiguous — the
// proxy may have applied it and lost only the answer — so it is tried
// again within twice the request timeout: a repeated ack of an applied one
// is answered INVALID_RECEIPT_HANDLE, which the v5 client reports as
// success. So SendAcks fails only when the proxy could not be reached
// meanwhile (the message is then redelivered after its invisibility).
func (s *subscription) SendAcks(ctx context.Context, handles []any) error {
	budget, cancel := context.WithTimeout(ctx, 2*s.c.o.RequestTimeout)
	defer cancel()
	return s.each(s.take(handles), "ack", func(h *handle) error {
		for attempt := 0; ; attempt++ {
			rctx, cancel := context.WithTimeout(budget, s.c.o.RequestTimeout)
			err := s.sc.Ack(rctx, h.mv)
			cancel()
			if err == nil {
				return nil
			}
			t := time.NewTimer(ackBackoff.Delay(attempt))
			select {
			case <-budget.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
	})
}

// SendRequeues changes each handle's invisible duration to delay: RocketMQ
// delivers the message again after it with DeliveryAttempt+1.
func (s *subscription) SendRequeues(_ context.Context, handles []any, delay time.Duration) error {
	return s.each(s.take(handles), "requeue", func(h *handle) error {
		return s.sc.ChangeInvisibleDuration(h.mv, delay)
	})
}

// each runs rpc on every handle, serialised with its renewal, in parallel.
func (s *subscription) each(hs []*handle, op string, rpc func(*handle) error) error {
	errs := make([]error, len(hs))
	parallel(len(hs), s.c.o.Parallelism, func(i int) {
		h := hs[i]
		h.mu.Lock()
		defer h.mu.Unlock()
		if err := rpc(h); err != nil {
			errs[i] = fmt.Errorf("rocketmq: %s %q in group %s: %w", op, h.mv.GetMessageId(), s.group, err)
		}
	})
	return errors.Join(errs...)
}

// lease renews the invisibility of the messages held: every sixth of the
// invisible duration, each message received, not being settled, whose
// invisibility ends within two thirds of the duration and that was
// received less than Options.MaxLease ago gets a fresh invisible duration.
// A renewal is thus sent at least half the duration before the
// invisibility would end. A failed renewal is reported on the Errors
// channel: the message may then be delivered again (at-least-once).
func (s *subscription) lease(ctx context.Context) time.Duration {
	inv, maxLease, now := s.c.o.InvisibleDuration, s.c.o.MaxLease, time.Now()
	var due []*handle
	s.mu.Lock()
	for h := range s.out {
		if now.Sub(h.received) < maxLease && time.Duration(h.due.Load()-now.UnixNano()) < 2*inv/3 {
			due = append(due, h)
		}
	}
	s.mu.Unlock()
	parallel(len(due), s.c.o.Parallelism, func(i int) { s.renew(ctx, due[i], inv) })
	return 0 // the period
}

// renew gives h a fresh invisible duration unless it is being settled.
func (s *subscription) renew(ctx context.Context, h *handle, inv time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.settling.Load() || ctx.Err() != nil {
		return
	}
	sent := time.Now()
	if err := s.sc.ChangeInvisibleDuration(h.mv, inv); err != nil {
		if !h.settling.Load() && ctx.Err() == nil {
			err = &ports.BrokerError{Op: "renew", Code: s.c.Classify(err).Code, Retryable: true, Err: fmt.Errorf(
				"rocketmq: renewing the invisible duration of message %s in group %s failed; it may be delivered again: %w",
				h.mv.GetMessageId(), s.group, err)}
			if !s.Report(err) {
				s.c.o.Logger.Warn("sluice rocketmq: " + err.Error())
			}
		}
		return
	}
	h.due.Store(sent.Add(inv).UnixNano())
}

// Close stops renewing, releases every message received and not settled
// (made visible to the group again, never acknowledged) and stops the
// consumer.
func (s *subscription) Close(context.Context) error {
	_ = s.timers.Stop(context.Background()) // a renewal's RPC is bounded by the request timeout
	s.mu.Lock()
	hs := make([]any, 0, len(s.out))
	for h := range s.out {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	_ = s.SendRequeues(context.Background(), hs, 0)
	err := s.sc.GracefulStop()
	s.unclaim()
	if err != nil {
		return fmt.Errorf("rocketmq: stop consumer group %s: %w", s.group, err)
	}
	return nil
}

// viewFacts are a message view's facts (ports.FactSource).
type viewFacts struct {
	group, id string
	attempt   int
}

func (f *viewFacts) Facts(yield func(key, value string) bool) {
	_ = yield(FactGroup, f.group) && yield(FactMessageID, f.id) && yield(FactDeliveryAttempt, strconv.Itoa(f.attempt))
}
