package mqtt

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/sluicemq/sluice/ports"
)

// Settle carries out d for every delivery in ds (see ports.Subscription).
//
//   - Ack releases each delivery's PUBACK. It is written at once when every
//     earlier delivery of the connection is acknowledged, otherwise as
//     soon as they are (MQTT's in-order rule). If the connection that
//     received a delivery is gone, Settle returns ErrAckDeferred: the
//     broker redelivers it and the adapter acknowledges that copy on
//     arrival.
//   - Requeue sends no PUBACK: the delivery is handed out again, with its
//     redelivery count + 1, after d.Delay (the local scheduler).
//   - DeadLetter publishes a copy of each delivery to "<ns>/<topic>/dlq" at
//     QoS 1, waits for every PUBACK, then acknowledges the originals. If a
//     dead-letter publish fails, nothing is acknowledged and Settle returns
//     the error; the adapter redelivers the originals itself after the
//     subscription's retry backoff, because the broker only redelivers on a
//     new connection.
func (s *subscription) Settle(ctx context.Context, ds []*ports.Delivery, d ports.Disposition) error {
	if len(ds) == 0 {
		return nil
	}
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
			s.sched.add(e, due)
		}
	}
}

// ack releases the PUBACK of each entry. An entry whose connection closed
// owes its PUBACK to the redelivered copy.
func (s *subscription) ack(es []*entry) error {
	deferred := 0
	for _, e := range es {
		for {
			s.mu.Lock()
			t := e.ticket
			s.mu.Unlock()
			err := s.sess.release(t)
			s.mu.Lock()
			if err == nil {
				e.state = stateDone
				if s.byID[e.id] == e {
					delete(s.byID, e.id)
				}
				s.mu.Unlock()
				break
			}
			if e.ticket != t { // a redelivered copy arrived meanwhile: acknowledge that one
				s.mu.Unlock()
				continue
			}
			e.state, e.owedAt = stateAckOwed, s.ups
			s.mu.Unlock()
			deferred++
			break
		}
	}
	if deferred > 0 {
		return fmt.Errorf("%w (%d of %d deliveries)", ErrAckDeferred, deferred, len(es))
	}
	return nil
}

// deadLetter publishes a copy of every entry to the dead-letter topic and
// waits for all confirms.
func (s *subscription) deadLetter(ctx context.Context, es []*entry, d ports.Disposition) error {
	topic := deadLetterTopic(s.a.opts.Namespace, s.spec.Topic)
	reason := d.ReasonText()
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		attempts := d.Attempts
		if attempts <= 0 {
			attempts = e.redeliveries + 1
		}
		m := ports.Message{Topic: ports.DeadLetterTopic(s.spec.Topic), Payload: e.pub.Payload, Headers: e.headers.Clone()}
		if m.Headers == nil {
			m.Headers = ports.Headers{}
		}
		delete(m.Headers, HeaderDeliverAt)
		m.Headers[ports.HeaderDeadLetterReason] = reason
		m.Headers[ports.HeaderDeadLetterTopic] = string(s.spec.Topic)
		m.Headers[ports.HeaderAttempts] = strconv.Itoa(attempts)
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
