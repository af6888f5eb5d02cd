package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Settle carries out d for every delivery of ds (see ports.Subscription).
// Its acceptance is deferred (ports.Subscription.Settle): it returns once
// the completions are recorded, without waiting for the offset commit,
// which the committer sends on its next round (see Config.CommitInterval
// and Config.CommitThreshold, and Flush):
//
//   - Ack records the completions.
//   - Requeue republishes each message to its topic with the redelivery
//     count incremented (and HeaderNotBefore when d.Delay > 0), waits for
//     acks=all, then records the originals as Ack does.
//   - DeadLetter publishes to "<topic>.dlq" with the reason headers, waits
//     for acks=all, then records the originals as Ack does.
//
// A recorded completion whose commit is lost (a crash before the next
// round, a revoke whose commit fails) is redelivered, never lost.
//
// A failed publish leaves the originals unsettled: they are handed out
// again by Receive after the retry backoff (the redelivery count grows).
// A delivery whose partition was revoked returns ErrRevoked and commits
// nothing. A delivery settled twice returns ports.ErrAlreadyCompleted (same
// action) or ports.ErrConflict (another action) and changes nothing.
func (s *subscription) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	if s.isStopped() {
		return ports.ErrClosed
	}
	if len(ds) == 0 {
		return nil
	}
	switch d.Action {
	case ports.Ack, ports.Requeue, ports.DeadLetter:
	default:
		return &ports.ValueError{Field: "Disposition.Action", Reason: fmt.Sprintf("unknown action %v", d.Action)}
	}
	if err := s.claimAll(ds, d.Action); err != nil {
		return err
	}
	// claimAll checked every Handle: recordOf cannot fail below.
	if d.Action != ports.Ack {
		if err := s.publishFor(ctx, ds, d); err != nil {
			for _, dd := range ds {
				s.handBack(recordOf(dd))
			}
			return err
		}
	}
	var errs []error
	recorded := 0
	for _, dd := range ds {
		r := recordOf(dd)
		next, err := r.p.complete(r, d.Action)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recorded++
		if next != nil {
			s.makeAvailable(next)
		}
	}
	if recorded > 0 {
		s.commit.record(recorded)
	}
	return errors.Join(errs...)
}

func (s *subscription) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// claimAll moves every delivery from out to settling, or none of them.
// It allocates nothing: the records are reached again through recordOf.
func (s *subscription) claimAll(ds []*ports.Delivery, a ports.Action) error {
	for i, d := range ds {
		r, ok := d.Handle.(*record)
		var err error
		if !ok || r.s != s {
			err = &ports.ValueError{Field: "Delivery.Handle", Reason: "is not a delivery of this subscription"}
		} else {
			err = r.claim(a)
		}
		if err != nil {
			for _, done := range ds[:i] {
				r := recordOf(done)
				r.p.mu.Lock()
				r.state = stateOut
				r.p.mu.Unlock()
			}
			return err
		}
	}
	return nil
}

// recordOf is the record of a delivery claimAll accepted.
func recordOf(d *ports.Delivery) *record { return d.Handle.(*record) }

// claim moves r from out to settling.
func (r *record) claim(a ports.Action) error {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked.Load() {
		return p.revokedErr()
	}
	switch r.state {
	case stateOut:
		r.state = stateSettling
		return nil
	case stateDone:
		if r.action == a {
			return fmt.Errorf("kafka: %v of offset %d: %w", a, r.offset, ports.ErrAlreadyCompleted)
		}
		return fmt.Errorf("kafka: %v after %v of offset %d: %w", a, r.action, r.offset, ports.ErrConflict)
	}
	return fmt.Errorf("kafka: %v of offset %d while it is not handed out: %w", a, r.offset, ports.ErrConflict)
}

// handBack returns r to the adapter after a failed settlement; Receive
// hands it out again after the retry backoff.
func (s *subscription) handBack(r *record) {
	p := r.p
	p.mu.Lock()
	if p.revoked.Load() || r.state != stateSettling {
		p.mu.Unlock()
		return
	}
	r.state = stateBuffered
	r.local++
	p.mu.Unlock()
	s.redeliverLater(r, s.spec.Retry.Backoff)
}

// publishFor publishes the requeue or dead-letter copies of ds and waits
// for every confirm.
func (s *subscription) publishFor(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	phys := s.phys
	if d.Action == ports.DeadLetter {
		phys = s.a.names.topic(ports.DeadLetterTopic(s.topic))
		if err := s.a.ensureTopic(ctx, phys); err != nil {
			return fmt.Errorf("kafka: dead letter: %w", err)
		}
	}
	now := time.Now()
	recs := make([]*record, len(ds))
	pms := make([]*sarama.ProducerMessage, len(ds))
	for i, dd := range ds {
		r := recordOf(dd)
		recs[i] = r
		// The copy is made from the record as consumed (not from the
		// Delivery the handler may have changed), with the header rules of
		// package kit: count+1 for a requeue; reason, topic and attempts
		// for a dead letter.
		orig := *ds[i]
		orig.Message = r.dec.msg
		var m ports.Message
		if d.Action == ports.Requeue {
			m = kit.RequeueCopy(&orig, d.Delay)
		} else {
			m = kit.DeadLetterCopy(&orig, d, time.Now())
		}
		var nb time.Time
		if m.Delay > 0 {
			nb = now.Add(m.Delay)
		}
		pms[i] = producerMessage(phys, &m, nb) // writes HeaderNotBefore in this adapter's RFC 3339 form
	}
	var errs []error
	for i, err := range s.a.prod.publish(ctx, pms) {
		if err != nil {
			errs = append(errs, fmt.Errorf("offset %d/%d: %w", recs[i].p.id, recs[i].offset, unconfirmed(err)))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("kafka: %v publish to %s failed, originals not settled: %w", d.Action, phys, errors.Join(errs...))
	}
	return nil
}
