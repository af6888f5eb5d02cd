package kit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Broker is what a Settler needs from an adapter: the two broker
// operations every settlement is made of.
type Broker interface {
	// Ack removes the originals from the broker (a native ack, a delete,
	// an offset recorded). It returns nil once the ack is accepted, done or
	// deferred (see ports.Subscription.Settle); on error none of ds may be
	// considered removed. Make it one broker call per batch where the
	// broker allows.
	Ack(ctx context.Context, ds []*ports.Delivery) error
	// Publish publishes msgs with the broker's confirm and returns one
	// error per message (nil: confirmed), or a nil slice when all were
	// confirmed. A requeue copy carries Message.Delay only when the
	// Settler has no Delayer: Publish must then honour it natively (a
	// broker's scheduled delivery).
	Publish(ctx context.Context, msgs []ports.Message) []error
}

// Settler carries out ports.Subscription.Settle over a Broker:
//
//   - Ack: Broker.Ack.
//   - Requeue: the Requeue field when set (but for a delivery at
//     DeliveryLimit); otherwise one RequeueCopy per delivery is published
//     with confirms and, only when every copy is confirmed, the originals
//     are acked. With a Delay and a
//     Delayer, the whole requeue is held until the delay is over and
//     Settle returns nil at once (a deferred acceptance): the original
//     stays unacked on the broker while it is held, so a Stop or a crash
//     before the copy is published makes the broker redeliver it, never
//     lose it. A held requeue whose publish or ack fails is retried with
//     DefaultBackoff (each failure reported to OnError) until it succeeds
//     or the Delayer stops.
//   - DeadLetter: the DeadLetter field when set; otherwise one
//     DeadLetterCopy per delivery is published with confirms and, only
//     when every copy is confirmed, the originals are acked.
//
// A batch has one outcome: a failed publish acks no original (the copies
// that were confirmed become duplicates, as at-least-once allows) and
// leaves every delivery unsettled, so it can be settled again or is
// redelivered. The Tracker detects a second settlement of a delivery
// (ports.ErrAlreadyCompleted for the same action, ports.ErrConflict for
// another). Settle is safe for concurrent use; what happens after Stop
// (ports.ErrClosed) is the adapter's to check before calling it.
type Settler struct {
	Broker  Broker
	Tracker Tracker
	// Delayer holds delayed requeues (see above). Nil: a delayed requeue
	// copy is published at once with Message.Delay set, for a broker that
	// delays natively on publish.
	Delayer *Delayer
	// OnError receives the failures of held requeues (report them through
	// Errors). Default: dropped.
	OnError func(error)
	// Now stamps each dead-letter copy with the time it is made
	// (ports.HeaderDeadLetterTime). Default: time.Now.
	Now func() time.Time
	// DeliveryLimit is the broker's (ports.Capabilities.DeliveryLimit):
	// a native Requeue of a delivery delivered that many times is a
	// RequeueCopy and an Ack instead.
	DeliveryLimit int
	// Requeue, when set, requeues natively with an exact redelivery count
	// (and the delay, natively or held by the adapter) instead of
	// publishing copies.
	Requeue func(ctx context.Context, ds []*ports.Delivery, delay time.Duration) error
	// DeadLetter, when set, dead-letters natively into a queue that
	// records disp's reason and attempts, instead of publishing copies and
	// acking.
	DeadLetter func(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error
}

// NewSettler returns a Settler over b with the default Tracker.
func NewSettler(b Broker) *Settler { return &Settler{Broker: b} }

// Settle applies disp to every delivery of ds (see Settler).
func (s *Settler) Settle(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	if len(ds) == 0 {
		return nil
	}
	if err := ValidDisposition(disp); err != nil {
		return err
	}
	if err := s.Tracker.Begin(ds, disp.Action); err != nil {
		return err
	}
	if disp.Action == ports.Requeue && disp.Delay > 0 && s.Delayer != nil {
		if s.Requeue == nil {
			err := s.hold(ds, disp.Delay)
			if err != nil {
				s.Tracker.End(ds, false)
			}
			return err
		}
	}
	err := s.apply(ctx, ds, disp)
	s.Tracker.End(ds, err == nil)
	return err
}

func (s *Settler) apply(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition) error {
	switch disp.Action {
	case ports.Requeue:
		if s.Requeue != nil {
			native, last := s.atLimit(ds)
			if len(native) > 0 {
				if err := s.Requeue(ctx, native, disp.Delay); err != nil {
					return err
				}
			}
			if len(last) == 0 {
				return nil
			}
			ds = last // copies, or the broker would deliver them no more
		}
		if err := s.publish(ctx, ds, disp, func(d *ports.Delivery) ports.Message { return RequeueCopy(d, disp.Delay) }); err != nil {
			return err
		}
	case ports.DeadLetter:
		if s.DeadLetter != nil {
			return s.DeadLetter(ctx, ds, disp)
		}
		now := time.Now
		if s.Now != nil {
			now = s.Now
		}
		at := now()
		if err := s.publish(ctx, ds, disp, func(d *ports.Delivery) ports.Message { return DeadLetterCopy(d, disp, at) }); err != nil {
			return err
		}
	}
	return s.Broker.Ack(ctx, ds)
}

// atLimit splits ds into the deliveries a native requeue may return and
// those delivered DeliveryLimit times already, whose requeue must be a
// copy (the broker would not deliver them again). A copy's delay travels
// in its not-before header, which the receiving side holds it for.
func (s *Settler) atLimit(ds []*ports.Delivery) (native, last []*ports.Delivery) {
	if s.DeliveryLimit <= 0 || !slices.ContainsFunc(ds, s.reached) {
		return ds, nil
	}
	for _, d := range ds {
		if s.reached(d) {
			last = append(last, d)
		} else {
			native = append(native, d)
		}
	}
	return native, last
}

func (s *Settler) reached(d *ports.Delivery) bool { return d.RedeliveryCount+1 >= s.DeliveryLimit }

// hold keeps a delayed requeue in the Delayer until it is due, then
// publishes the copies and acks the originals, retrying on failure.
func (s *Settler) hold(ds []*ports.Delivery, delay time.Duration) error {
	held := append([]*ports.Delivery(nil), ds...) // Settle must not keep ds
	var run func(ctx context.Context)
	attempt := 0
	run = func(ctx context.Context) {
		err := s.apply(ctx, held, ports.Disposition{Action: ports.Requeue})
		if err == nil {
			s.Tracker.End(held, true)
			return
		}
		if ctx.Err() != nil {
			return // stopping: the originals stay unacked and are redelivered
		}
		wait := DefaultBackoff.Delay(attempt)
		attempt++
		if s.OnError != nil {
			s.OnError(fmt.Errorf("held requeue of %d message(s) failed (attempt %d), retrying in %v; the originals stay unacked meanwhile: %w", len(held), attempt, wait.Round(time.Millisecond), err))
		}
		_ = s.Delayer.After(wait, run) // fails only after Stop: redelivered then
	}
	if err := s.Delayer.After(delay, run); err != nil {
		return fmt.Errorf("requeue with delay %v: %w", delay, err)
	}
	return nil
}

func (s *Settler) publish(ctx context.Context, ds []*ports.Delivery, disp ports.Disposition, mk func(*ports.Delivery) ports.Message) error {
	msgs := make([]ports.Message, len(ds))
	for i, d := range ds {
		msgs[i] = mk(d)
	}
	return PublishErrors(disp.Action, ds, s.Broker.Publish(ctx, msgs))
}

// PublishErrors joins the non-nil errs of a copy publish, each naming the
// action, the message and the topic; nil when all are nil. errs[i] belongs
// to ds[i]; a shorter errs counts the missing ones as confirmed.
func PublishErrors(a ports.Action, ds []*ports.Delivery, errs []error) error {
	var out []error
	for i, err := range errs {
		if err != nil && i < len(ds) {
			out = append(out, fmt.Errorf("%v %q from %q: publish of the copy not confirmed (the original stays unsettled): %w", a, ds[i].ID, string(ds[i].Topic), err))
		}
	}
	return errors.Join(out...)
}

// ValidDisposition rejects an unknown action or a negative delay with an
// error wrapping ports.ErrInvalid.
func ValidDisposition(d ports.Disposition) error {
	switch d.Action {
	case ports.Ack, ports.Requeue, ports.DeadLetter:
	default:
		return &ports.ValueError{Field: "Disposition.Action", Reason: fmt.Sprintf("is unknown (%v): use ports.Ack, ports.Requeue or ports.DeadLetter", d.Action)}
	}
	if d.Delay < 0 {
		return &ports.ValueError{Field: "Disposition.Delay", Reason: "must not be negative"}
	}
	return nil
}
