package portable

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// broker is the kit.Broker the Settler carries Settle out over: the
// driver's acknowledgement and confirmed publish (of copies, where the
// driver has no native requeue or dead letter).
type broker struct{ s *Subscription }

func (b broker) Ack(ctx context.Context, ds []*ports.Delivery) error {
	hs := handles(ds)
	err := b.s.ds.SendAcks(ctx, *hs)
	release(hs)
	return b.s.a.classify("ack", err)
}

func (b broker) Publish(ctx context.Context, msgs []ports.Message) []error {
	send := b.s.a.d.SendBatch
	// The Settler publishes either requeue copies, on the subscription's
	// topic (addressed to its group), or dead-letter copies, on its
	// dead-letter topic.
	if len(msgs) > 0 && msgs[0].Topic == b.s.spec.Topic {
		kit.AddressCopies(msgs, b.s.group)
		if rc, ok := b.s.ds.(driver.RequeueCopier); ok {
			send = rc.SendRequeueCopies
		}
	}
	errs := send(ctx, msgs)
	for i, err := range errs {
		errs[i] = b.s.a.classify("publish copy", err)
	}
	return errs
}

// requeue is the Settler's native Requeue over a driver.Requeuer. A delay
// the broker cannot honour natively is held on the scheduler, the
// originals staying unacknowledged meanwhile.
func (s *Subscription) requeue(ctx context.Context, ds []*ports.Delivery, delay time.Duration) error {
	hs, rq := handleSlice(ds), s.ds.(driver.Requeuer)
	if delay <= 0 || s.a.caps.DelayedRequeue {
		return s.a.classify("requeue", rq.SendRequeues(ctx, hs, delay))
	}
	return s.delayer.After(delay, func(ctx context.Context) {
		if err := rq.SendRequeues(ctx, hs, 0); err != nil && ctx.Err() == nil {
			s.report(fmt.Errorf("held requeue of %d message(s) failed; they stay unacknowledged and are redelivered: %w", len(hs), s.a.classify("requeue", err)))
		}
	})
}

// deadLetter is the Settler's native DeadLetter over a driver.DeadLetterer.
func (s *Subscription) deadLetter(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	return s.a.classify("dead letter", s.ds.(driver.DeadLetterer).SendDeadLetters(ctx, handleSlice(ds), disp))
}

// handleSlice returns the driver handles of ds, in order, in a new slice.
func handleSlice(ds []*ports.Delivery) []any {
	hs := make([]any, len(ds))
	for i, d := range ds {
		hs[i] = d.Handle.(*handle).h
	}
	return hs
}

// spare recycles the handle slices of acknowledgements (a driver does not
// keep them).
var spare = sync.Pool{New: func() any { return new([]any) }}

// handles returns the driver handles of ds in a recycled slice; give it
// back with release.
func handles(ds []*ports.Delivery) *[]any {
	p := spare.Get().(*[]any)
	hs := (*p)[:0]
	for _, d := range ds {
		hs = append(hs, d.Handle.(*handle).h)
	}
	*p = hs
	return p
}

func release(p *[]any) {
	clear(*p)
	*p = (*p)[:0]
	spare.Put(p)
}

// handBack gives the broker back the deliveries of ds whose settlement
// failed (kit.Settler.HandBack): through the driver's Abandoner, a
// Requeuer's native requeue, or else by handing them out again here,
// counted (a Kafka offset stays uncommitted meanwhile).
func (s *Subscription) handBack(ds []*ports.Delivery, err error) {
	ab, _ := s.ds.(driver.Abandoner)
	rq, _ := s.ds.(driver.Requeuer)
	s.settler.HandBack(ds, err, ab == nil && rq != nil, func(ctx context.Context, ds []*ports.Delivery) error {
		s.gate.RLock()
		defer s.gate.RUnlock()
		if s.isStopped() { // Stop gave back every unsettled one
			return nil
		}
		s.a.log.Info("sluice: handing back deliveries whose settlement failed", "adapter", s.a.Name(), "topic", string(s.spec.Topic), "count", len(ds))
		switch {
		case ab != nil:
			ab.Abandon(handleSlice(ds))
		case rq != nil:
			return s.a.classify("requeue", rq.SendRequeues(ctx, handleSlice(ds), 0))
		default:
			for _, d := range ds {
				s.again(s.mine(d))
			}
		}
		return nil
	})
}

// again hands x's record out once more, as a new delivery counted one
// more redelivery, for the next Receive; it takes an in-flight slot.
func (s *Subscription) again(x *handle) {
	old := &x.r.d
	x.lazy.Load(old)
	r := new(received)
	r.d, r.h = *old, handle{h: x.h, sub: s, r: r}
	r.d.Handle, r.d.ReceivedAt = &r.h, s.a.clock.Now()
	r.d.RedeliveryCount++
	s.out.Add(1)
	s.due(&r.d)
}
