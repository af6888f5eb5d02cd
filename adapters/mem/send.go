package mem

import (
	"bytes"
	"context"
	"errors"

	"github.com/sluicemq/sluice/ports"
)

// Send validates, stamps and stores each message, then returns: the
// in-process broker confirms synchronously, so a nil error means every
// message is in the queues bound to its topic (or, with Message.Delay, in
// the scheduler, routed to the queues bound when it falls due). A topic
// with no queue yet — no subscription ever made and no group declared with
// DeclareGroup — stores nothing: that message fails with
// ports.ErrNoSubscriber instead of being dropped silently. A delayed
// message is routed to the queues bound when it falls due.
//
// A message above [MaxMessageBytes] fails with a *ports.SizeError (it
// wraps ports.ErrInvalid) and is not stored. A message to a topic declared
// with a Retention is dropped unconsumed once it waited that long after it
// was due; a best-effort message (Message.QoS, or the declared topic's
// class for a message that leaves QoS at its default) is dropped by a
// queue at its [WithMaxQueue] bound instead of making Send wait, and is
// counted in QueueStats.Dropped. A topic mapped by [WithExisting] is
// published to under its existing name.
//
// Send copies each message's headers and payload: the caller may reuse
// them as soon as Send returns. Each failed message is reported as a
// *ports.SendError joined with errors.Join: wrapping ports.ErrInvalid for
// a message that fails Message.Validate, ports.ErrUnconfirmed while
// [Broker.FailSends] is on, ports.ErrClosed after Close, ctx.Err() when
// ctx was done before Send started (nothing is stored then), or
// [ErrQueueFull] joined with ctx.Err() for a message that waited for room
// in a full queue until ctx was done (see [WithMaxQueue]; nothing of that
// message is stored, the messages before it are).
func (a *Adapter) Send(ctx context.Context, msgs ...ports.Message) error {
	if err := ctx.Err(); err != nil {
		return failAll(msgs, err)
	}
	if a.closed.Load() || a.b.closed.Load() {
		return failAll(msgs, ports.ErrClosed)
	}
	b := a.b
	now := b.clock.Now()
	var errs []error
	for i := range msgs {
		m := msgs[i] // a copy: Stamp replaces its Headers, not the caller's
		if err := m.Validate(); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		if err := m.CheckSize(MaxMessageBytes, 0); err != nil {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			continue
		}
		if b.failSends.Load() {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: ports.ErrUnconfirmed})
			continue
		}
		m.Stamp(now)
		phys := a.physical(m.Topic)
		msg := message{
			topic:   phys,
			key:     m.Key,
			id:      m.Headers[ports.HeaderID],
			payload: bytes.Clone(m.Payload),
			headers: m.Headers,
			qos:     classOf(m.QoS),
		}
		if spec := b.spec(a.ns, phys); spec.Retention > 0 || spec.QoS != ports.AtLeastOnce {
			if spec.Retention > 0 {
				msg.expires = now.Add(m.Delay + spec.Retention).UnixNano() // measured from when it is due
			}
			if m.QoS == ports.AtLeastOnce {
				msg.qos = classOf(spec.QoS)
			}
		}
		if m.Delay <= 0 {
			if err := b.send(ctx, a.ns, &msg); err != nil {
				errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: err})
			}
			continue
		}
		if !b.bound(a.ns, msg.topic) {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: ports.ErrNoSubscriber})
			continue
		}
		if !b.delay(a.ns, msg, m.Delay) {
			errs = append(errs, &ports.SendError{Index: i, Topic: m.Topic, Err: ports.ErrClosed})
		}
	}
	return errors.Join(errs...)
}

// failAll reports every message of a Send as unconfirmed with err.
func failAll(msgs []ports.Message, err error) error {
	if len(msgs) == 0 {
		return err
	}
	errs := make([]error, len(msgs))
	for i := range msgs {
		errs[i] = &ports.SendError{Index: i, Topic: msgs[i].Topic, Err: err}
	}
	return errors.Join(errs...)
}
