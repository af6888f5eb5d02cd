package portable

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/adapters/driver"
	"github.com/sluicemq/sluice/ports"
)

var _ ports.TransactionalSubscriber = (*Adapter)(nil)

// SubscribeTransactional opens a transactional subscription where the
// driver is a driver.Transactor that declares Capabilities.TransactionalSend;
// elsewhere it returns an error wrapping ports.ErrExactlyOnce.
func (a *Adapter) SubscribeTransactional(ctx context.Context, spec ports.SubscriptionSpec) (ports.TransactionalSubscription, error) {
	t, ok := a.d.(driver.Transactor)
	if !ok || !a.caps.TransactionalSend {
		return nil, fmt.Errorf("%s cannot commit a consumed position and produced messages in one transaction (only kafka can): %w", a.Name(), ports.ErrExactlyOnce)
	}
	s, err := a.subscribe(ctx, spec, func(ctx context.Context, spec ports.SubscriptionSpec) (driver.Subscription, error) {
		return t.SubscribeTransactional(ctx, spec)
	})
	if err != nil {
		return nil, err
	}
	if _, ok := s.ds.(driver.AckFlusher); ok {
		return transactingFlushing{flushing{s}}, nil
	}
	return transacting{s}, nil
}

// transacting and transactingFlushing are the subscriptions of a
// driver.Transactor, without and with deferred acknowledgements.
type (
	transacting         struct{ *Subscription }
	transactingFlushing struct{ flushing }
)

func (t transacting) Stage(ctx context.Context, d *ports.Delivery, msgs []ports.Message) error {
	return t.stage(ctx, d, msgs)
}

func (t transactingFlushing) Stage(ctx context.Context, d *ports.Delivery, msgs []ports.Message) error {
	return t.stage(ctx, d, msgs)
}

// stage validates, size-checks and stamps copies of msgs as Send does and
// hands them to the driver with d's handle.
func (s *Subscription) stage(ctx context.Context, d *ports.Delivery, msgs []ports.Message) error {
	if _, err := s.claim(d); err != nil {
		return err
	}
	buf := stagedPool.Get().(*[]ports.Message)
	defer func() { // the driver does not keep the slice
		clear(*buf)
		stagedPool.Put(buf)
	}()
	out := append((*buf)[:0], msgs...)
	*buf = out
	for i, m := range out {
		err := m.Validate()
		if err == nil {
			err = m.CheckSize(s.a.caps.MaxMessageBytes, 0)
		}
		if err == nil && m.Delay > 0 {
			err = fmt.Errorf("%w: a delayed message cannot be part of a transaction", ports.ErrUnsupported)
		}
		if err != nil {
			return &ports.SendError{Index: i, Topic: m.Topic, Err: err}
		}
		m.Stamp() // replaces the copy's headers, not the caller's
		out[i] = m
	}
	s.gate.RLock()
	defer s.gate.RUnlock()
	if s.isStopped() {
		return ports.ErrClosed
	}
	return s.a.classify("stage", s.ds.(driver.TransactionalSubscription).Stage(ctx, d.Handle.(*handle).h, d.Facts, out))
}

// stagedPool holds the slices stage hands the driver its stamped copies
// in.
var stagedPool = sync.Pool{New: func() any { return new([]ports.Message) }}

// discard drops what was staged for the deliveries of ds that are this
// subscription's, before they are requeued or dead-lettered.
func (s *Subscription) discard(ds []*ports.Delivery) {
	ts, ok := s.ds.(driver.TransactionalSubscription)
	if !ok {
		return
	}
	hs := make([]any, 0, len(ds))
	for _, d := range ds {
		if _, err := s.claim(d); err == nil {
			hs = append(hs, d.Handle.(*handle).h)
		}
	}
	ts.Discard(hs)
}
