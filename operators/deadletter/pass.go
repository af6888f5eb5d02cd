package deadletter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Why a pass ended.
const (
	EndWrapped = "wrapped" // it went round (received a message it had put back), then nothing new came
	EndIdle    = "idle"    // nothing to receive for Options.Idle
	EndLimit   = "limit"   // Options.Limit deliveries examined: partial
	EndDone    = "done"    // everything asked for was found
)

// Pass reports one pass over the area.
type Pass struct {
	// Examined counts the deliveries received (a message put back and
	// received again counts once).
	Examined int `json:"examined"`
	// End is why the pass ended: EndWrapped, EndIdle, EndLimit or EndDone.
	End string `json:"end"`
}

// Complete reports whether the pass saw the whole area (it did not stop
// at Options.Limit).
func (p Pass) Complete() bool { return p.End != EndLimit }

// visitor decides, per delivery, whether a pass takes it (true) or leaves
// it in the area; act settles the taken ones of one batch. done, when
// set, ends the pass early once it reports true.
type visitor struct {
	take func(d *ports.Delivery) bool
	act  func(ctx context.Context, sub ports.Subscription, taken []*ports.Delivery) error
	done func() bool
}

// walk runs one pass: it receives the area at most Options.Batch
// deliveries at a time, settles each batch (act for the taken ones,
// Requeue for the others) before receiving the next, and stops the
// subscription at the end, which hands back anything left unsettled (after
// an act error or a cancelled ctx).
func (ar *Area) walk(ctx context.Context, v visitor) (Pass, error) {
	return ar.walkTopic(ctx, ar.Topic(), ar.group, v)
}

// walkTopic is walk over any topic and group (the audit topic).
func (ar *Area) walkTopic(ctx context.Context, topic ports.Topic, group string, v visitor) (Pass, error) {
	var p Pass
	spec := ports.SubscriptionSpec{
		Topic: topic, Group: group, InFlight: ar.o.Batch,
		DisableDeadLetter: true,
		// Unbounded: a broker that dead-letters on its own after N
		// redeliveries must never move the area's messages elsewhere.
		Retry: ports.RetryPolicy{MaxAttempts: -1, NoBackoff: true, NoJitter: true},
	}
	if ar.a.Capabilities().StartEarliest {
		spec.Start = ports.StartEarliest // a new group sees what is retained
	}
	sub, err := ar.a.Subscribe(ctx, spec)
	if err != nil {
		return p, fmt.Errorf("subscribing to %q as group %q: %w", string(spec.Topic), group, err)
	}
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range sub.Errors() {
			ar.o.Logger.Warn("dead-letter area subscription", "topic", string(spec.Topic), "group", group, "error", err)
		}
	}()
	defer func() {
		// Stop even when ctx is done: it hands back what is unsettled.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if serr := sub.Stop(sctx); serr != nil && !errors.Is(serr, ports.ErrClosed) {
			ar.o.Logger.Warn("stopping dead-letter area subscription", "topic", string(spec.Topic), "error", serr)
		}
		select { // Errors is closed after Stop (the Port's contract)
		case <-errsDone:
		case <-sctx.Done():
			ar.o.Logger.Warn("dead-letter area subscription: its error channel was not closed after Stop", "topic", string(spec.Topic))
		}
	}()

	putBack := map[string]bool{}
	// held are deliveries this pass put back once and received again (it
	// went round). They are held, not put back again at once: only time
	// shows that nothing is left, because a topic of several streams
	// (Kafka partitions, RocketMQ queues) can hand back one stream's
	// copies before another stream's first message. They go back once,
	// when the window is full of them (once, unless something new came
	// since) and at the end of the pass.
	var held []*ports.Delivery
	var prevKept map[string]bool // put back by the previous batch
	prevFull := false            // the previous Receive returned all it was asked for
	wentRound, newSinceFlush := false, false
	// The pass ends when nothing new (a message it had not seen) came for
	// Idle, FirstWait before the first one.
	deadline := time.Now().Add(ar.o.FirstWait)
	end := func(why string) (Pass, error) {
		if err := ar.putBack(ctx, sub, topic, held); err != nil {
			return p, err
		}
		p.End = why
		return p, nil
	}
	for {
		if p.Examined >= ar.o.Limit {
			return end(EndLimit)
		}
		if v.done != nil && v.done() {
			return end(EndDone)
		}
		if wentRound && !time.Now().Before(deadline) {
			// Only what went round came for Idle (a Receive that always
			// has something never times out).
			return end(EndWrapped)
		}
		if len(held) >= ar.o.Batch {
			// The window is full of what went round. Put it back once
			// after something new came, to make room for what may still
			// come; twice in a row would send the same messages round
			// and round, each time raising their delivery counts (a
			// broker may drop a message past its delivery limit).
			if !newSinceFlush {
				return end(EndWrapped)
			}
			if err := ar.putBack(ctx, sub, topic, held); err != nil {
				return p, err
			}
			held, newSinceFlush = held[:0], false
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		asked := min(ar.o.Batch-len(held), ar.o.Limit-p.Examined)
		ds, err := sub.Receive(rctx, asked)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return p, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if wentRound {
					return end(EndWrapped)
				}
				return end(EndIdle)
			}
			return p, fmt.Errorf("receiving from %q: %w", string(spec.Topic), err)
		}
		stalled := ar.putBackMode() == PutBackRequeue && prevFull
		for _, d := range ds {
			stalled = stalled && prevKept[entryOf(d).ID]
		}
		if stalled {
			// A full batch put back by Requeue came straight back, before
			// anything else: this adapter's requeue returns a message to the
			// head (RocketMQ's ChangeInvisibleDuration), or the area is
			// exactly one batch. Put it back by copy from now on.
			ar.requeueStalls.Store(true)
			ar.o.Logger.Info("dead-letter pass: requeue hands messages straight back; putting back by copy", "topic", string(topic), "adapter", ar.a.Name())
			if err := ar.putBack(ctx, sub, topic, ds); err != nil {
				return p, err
			}
			prevKept, prevFull = nil, false
			continue
		}
		var taken, kept []*ports.Delivery
		kept0 := map[string]bool{}
		for _, d := range ds {
			id := entryOf(d).ID
			switch {
			case putBack[id]:
				wentRound = true
				held = append(held, d)
			case v.take != nil && v.take(d):
				p.Examined++
				taken = append(taken, d)
			default:
				p.Examined++
				putBack[id] = true
				kept0[id] = true
				kept = append(kept, d)
			}
		}
		prevKept, prevFull = kept0, len(ds) == asked
		if len(kept)+len(taken) > 0 {
			deadline, newSinceFlush = time.Now().Add(ar.o.Idle), true
		}
		if len(kept) > 0 {
			if err := ar.putBack(ctx, sub, topic, kept); err != nil {
				return p, err
			}
		}
		if len(taken) > 0 {
			if err := v.act(ctx, sub, taken); err != nil {
				return p, err
			}
		}
	}
}

// putBackMode resolves PutBackAuto: Requeue where the adapter declares
// per-message acknowledgement and its requeue was not seen handing
// messages straight back; Republish otherwise.
func (ar *Area) putBackMode() PutBack {
	if ar.o.PutBack != PutBackAuto {
		return ar.o.PutBack
	}
	if !ar.a.Capabilities().PerMessageAck || ar.requeueStalls.Load() {
		return PutBackRepublish
	}
	return PutBackRequeue
}

// putBack leaves ds in the area (see PutBack).
func (ar *Area) putBack(ctx context.Context, sub ports.Subscription, topic ports.Topic, ds []*ports.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	if ar.putBackMode() == PutBackRequeue {
		if err := sub.Settle(ctx, ds, ports.Disposition{Action: ports.Requeue}); err != nil {
			return fmt.Errorf("putting %d dead letters back: %w", len(ds), err)
		}
		return nil
	}
	msgs := make([]ports.Message, len(ds))
	for i, d := range ds {
		h := d.Headers.Clone()
		if h.Get(ports.HeaderID) == "" {
			h.Set(ports.HeaderID, d.ID)
		}
		h.Del(ports.HeaderRedeliveryCount)
		msgs[i] = ports.Message{Topic: topic, Key: d.Key, Payload: d.Payload, Headers: h}
	}
	sendErr := ar.a.Send(ctx, msgs...)
	failed := map[int]bool{}
	if sendErr != nil {
		ses := ports.SendErrors(sendErr)
		for _, se := range ses {
			failed[se.Index] = true
		}
		if len(ses) == 0 {
			for i := range ds {
				failed[i] = true
			}
		}
	}
	var ok, bad []*ports.Delivery
	for i, d := range ds {
		if failed[i] {
			bad = append(bad, d)
		} else {
			ok = append(ok, d)
		}
	}
	if len(ok) > 0 {
		if err := sub.Settle(ctx, ok, ports.Disposition{Action: ports.Ack}); err != nil {
			return fmt.Errorf("acknowledging %d dead letters put back by a copy (the copies are in the area): %w", len(ok), err)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("putting %d dead letters back by a copy: %w (they stay unsettled and return to the area)", len(bad), sendErr)
	}
	return nil
}
