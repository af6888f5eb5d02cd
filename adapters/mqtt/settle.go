package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// Settle carries out d for every delivery in ds (see ports.Subscription).
//
//   - Ack releases each delivery's PUBACK. It is written at once when every
//     earlier delivery of the connection is acknowledged, otherwise as
//     soon as they are (MQTT's in-order rule); a batch is one write. The
//     PUBACK is written, not answered: Settle returns nil once it is
//     written or queued (a deferred acceptance; Flush waits for the
//     write). If the connection that received a delivery is gone, Settle
//     still returns nil: the broker redelivers the message on the next
//     connection and the adapter acknowledges that copy on arrival without
//     handing it out again (while the subscription runs; after Stop, the
//     copy is delivered again to the next consumer — at-least-once).
//   - Requeue sends no PUBACK: the delivery is handed out again, with its
//     redelivery count + 1, after d.Delay (the local scheduler).
//   - DeadLetter publishes a copy of each delivery to "<ns>/<topic>/dlq" at
//     QoS 1, waits for every PUBACK, then acknowledges the originals. If a
//     dead-letter publish fails, nothing is acknowledged and Settle returns
//     the error; the adapter redelivers the originals itself after the
//     subscription's retry backoff, because the broker only redelivers on a
//     new connection.
//   - On a best-effort (QoS 0) subscription Requeue and DeadLetter drop the
//     delivery, as Ack does: it is never requeued or dead-lettered.
func (s *subscription) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	if len(ds) == 0 {
		return nil
	}
	d = kit.BestEffortDisposition(s.spec, d)
	var one [1]*entry
	es := one[:0]
	if len(ds) > 1 {
		es = make([]*entry, 0, len(ds))
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ports.ErrClosed
	}
	for _, dl := range ds {
		e, ok := dl.Handle.(*entry)
		if !ok || e.sub != s || e.state != stateOut || e.out != dl {
			s.mu.Unlock()
			return fmt.Errorf("mqtt: settle %s: %w: delivery %q is not outstanding on this subscription", d.Action, ports.ErrInvalid, dl.ID)
		}
		es = append(es, e)
	}
	switch d.Action {
	case ports.Ack, ports.DeadLetter:
		for _, e := range es {
			e.state, e.out = stateSettling, nil
		}
	case ports.Requeue:
		for _, e := range es {
			e.out = nil
			e.redeliveries++
		}
		s.mu.Unlock()
		s.requeue(es, d.Delay)
		return nil
	default:
		s.mu.Unlock()
		return fmt.Errorf("mqtt: settle: %w: action %v", ports.ErrInvalid, d.Action)
	}
	s.mu.Unlock()
	if d.Action == ports.DeadLetter {
		if err := s.deadLetter(ctx, es, d); err != nil {
			s.mu.Lock()
			for _, e := range es {
				e.redeliveries++
			}
			s.mu.Unlock()
			s.requeue(es, max(s.spec.Retry.Delay(es[0].redeliveries), minRedeliverAfterFailure))
			return err
		}
	}
	return s.ack(es)
}

// minRedeliverAfterFailure paces local redeliveries after a failed
// dead-letter publish when the retry policy has no backoff.
const minRedeliverAfterFailure = 50 * time.Millisecond

// requeue hands es back to the ready queue now, or to the scheduler.
func (s *subscription) requeue(es []*entry, delay time.Duration) {
	s.mu.Lock()
	for _, e := range es {
		if s.closed {
			break
		}
		if delay <= 0 {
			s.pushLocked(e)
		} else {
			e.state = stateWaiting
		}
	}
	s.mu.Unlock()
	if delay > 0 {
		due := time.Now().Add(delay)
		for _, e := range es {
			s.hold(e, due)
		}
	}
}

// ack releases the PUBACKs of es with one lock of the ack session and one
// write. An entry whose connection closed (or broke while its PUBACK was
// being written) owes its PUBACK to the copy the broker redelivers: it is
// marked so and acknowledged on arrival without being handed out again —
// a deferred acceptance, not an error.
func (s *subscription) ack(es []*entry) error {
	for len(es) > 0 {
		var oneT [1]ackTicket
		var oneG [1]bool
		ts, gone := oneT[:0], oneG[:]
		if len(es) > 1 {
			ts, gone = make([]ackTicket, 0, len(es)), make([]bool, len(es))
		}
		s.mu.Lock()
		for _, e := range es {
			ts = append(ts, e.ticket)
		}
		s.mu.Unlock()
		werr := s.sess.releaseAll(ts, gone)
		var again []*entry
		s.mu.Lock()
		for i, e := range es {
			switch {
			case !gone[i] && werr == nil:
				e.state = stateDone
				if s.byID[e.id] == e {
					delete(s.byID, e.id)
				}
			case e.ticket != ts[i]: // a redelivered copy arrived meanwhile: acknowledge that one
				again = append(again, e)
			default:
				e.state, e.owedAt = stateAckOwed, s.ups
			}
		}
		s.mu.Unlock()
		es = again
	}
	return nil
}

// deadLetter publishes a copy of every entry to the dead-letter topic and
// waits for all confirms.
func (s *subscription) deadLetter(ctx context.Context, es []*entry, d ports.Disposition) error {
	topic := s.a.physical(ports.DeadLetterTopic(s.spec.Topic))
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		s.mu.Lock() // a redelivered PUBLISH on a new connection replaces e.pub (onPublish)
		payload := e.pub.Payload
		s.mu.Unlock()
		m := kit.DeadLetterCopy(&ports.Delivery{
			Message:         ports.Message{Topic: s.spec.Topic, Key: e.headers[ports.HeaderPartitionKey], Payload: payload, Headers: e.headers},
			ID:              e.id,
			RedeliveryCount: e.redeliveries,
		}, d)
		delete(m.Headers, HeaderDeliverAt)
		p := toPublish(topic, &m, time.Time{})
		wg.Add(1)
		go func(p *paho.Publish) {
			defer wg.Done()
			if err := s.a.publish(ctx, p); err != nil {
				errs[i] = fmt.Errorf("mqtt: dead-letter %s to %s: %w", e.id, topic, err)
			}
		}(p)
	}
	wg.Wait()
	return errors.Join(errs...)
}
