package flow

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/ports"
)

// ErrTransactNotOneDelivery is the fatal error of a pipeline whose
// TransactSink got an item that is not exactly one delivery.
var ErrTransactNotOneDelivery = errors.New("flow: TransactSink got an item that is not exactly one delivery (a batch, a Join, a part of a Split): a transaction commits each delivery's position with its output, so give it one item per delivery")

// TransactSink ends a consume-transform-produce pipeline with an exactly
// once send: for each item, build returns the messages to send for it, and
// the sink stages them against the item's delivery on the pipeline's own
// subscription (ports.TransactionalSubscription). When the item succeeds,
// its ACK has the messages published and the delivery's consumed position
// committed in one broker transaction, holding the other deliveries
// acknowledged since the last one (Kafka commits on an interval, as it
// commits offsets, and at Stop). A consumer that
// reads the output read-committed sees each result exactly once: a crash
// or a failed transaction leaves nothing visible and the input is
// redelivered.
//
// The messages go to the subscription's broker, through the subscription:
// a transaction spans one Kafka cluster, so there is no adapter argument
// and no way to send one of them elsewhere. The adapter must declare
// Capabilities.TransactionalSend (kafka); on any other, Start refuses the
// pipeline with an error wrapping ports.ErrExactlyOnce. The sink declares
// ExactlyOnceEffect, so the pipeline may ask for ports.ExactlyOnce.
//
// build's error completes the item as Sink's does (poison dead-letters,
// another error requeues; nothing is staged); build may return no
// message (the input is consumed, nothing sent). An item that is not one
// delivery (after operators.Batch, Join or FlatMap) is cancelled and the
// pipeline fails with ErrTransactNotOneDelivery.
func TransactSink[T any](in Stream[T], build func(ctx context.Context, v T) ([]ports.Message, error), opts ...StageOption) {
	transactSink(in, func(ctx context.Context, v T, st stager) error {
		msgs, err := build(ctx, v)
		if err != nil || len(msgs) == 0 {
			return err
		}
		return st.stage(ctx, msgs)
	}, opts)
}

// stager stages messages against one delivery of a transactional
// subscription.
type stager struct {
	sub ports.TransactionalSubscription
	d   *ports.Delivery
}

func (st stager) stage(ctx context.Context, msgs []ports.Message) error {
	return st.sub.Stage(ctx, st.d, msgs)
}

// transactSink is TransactSink with send, which stages what it builds for
// v with st.
func transactSink[T any](in Stream[T], send func(ctx context.Context, v T, st stager) error, opts []StageOption) {
	src := in.take()
	cfg := in.p.sinkOptions(opts)
	p := in.p
	p.sinks = append(p.sinks, sinkInfo{exactlyOnce: true, transactional: true, fanOut: in.fanOut})
	body := func(it Item[T]) {
		if err := it.Ctx.Err(); err != nil {
			_ = it.Completion.Cancel(err)
			return
		}
		if it.Msg == nil {
			_ = it.Completion.Cancel(ErrTransactNotOneDelivery)
			p.fail(ErrTransactNotOneDelivery)
			return
		}
		st := stager{p.sub.(ports.TransactionalSubscription), it.Msg}
		_ = it.Settle(callSink(p, func(ctx context.Context, v T) error { return send(ctx, v, st) }, it.Ctx, it.Value))
	}
	runTerminal(in, src, cfg.workers, body)
}

// TransactTo is TransactSink sending each value as one JSON message to
// topic, built by NewMessage from the item's context (so it carries the
// input's request, correlation and causation ids) with opts applied.
func TransactTo[T any](in Stream[T], topic ports.Topic, opts ...MessageOption) {
	transactSink(in, func(ctx context.Context, v T, st stager) error {
		m, err := NewMessage(ctx, topic, v, opts...)
		if err != nil {
			return err
		}
		one := oneMessage.Get().(*[1]ports.Message)
		one[0] = m
		err = st.stage(ctx, one[:]) // Stage does not keep the slice
		one[0] = ports.Message{}
		oneMessage.Put(one)
		return err
	}, nil)
}

// oneMessage holds the slices TransactTo stages its messages in.
var oneMessage = sync.Pool{New: func() any { return new([1]ports.Message) }}

// subscribe opens the pipeline's subscription: a transactional one when a
// sink is TransactSink, on the adapter or the one it wraps (Unwrap).
func (p *Pipeline) subscribe(ctx context.Context, spec ports.SubscriptionSpec) (ports.Subscription, error) {
	transactional := false
	for _, s := range p.sinks {
		transactional = transactional || s.transactional
	}
	if !transactional {
		return p.adapter.Subscribe(ctx, spec)
	}
	a := p.adapter
	for {
		if ts, ok := a.(ports.TransactionalSubscriber); ok && a.Capabilities().TransactionalSend {
			return ts.SubscribeTransactional(ctx, spec)
		}
		w, ok := a.(interface{ Unwrap() ports.Adapter })
		if !ok {
			return nil, fmt.Errorf("flow: TransactSink needs an adapter that commits consumed positions and produced messages in one transaction (Capabilities.TransactionalSend: kafka), and %s cannot: end the pipeline with inbox.Sink (operators/inbox), or send with flow.Send at least once and make the consumer of the output idempotent: %w", p.adapter.Name(), ports.ErrExactlyOnce)
		}
		a = w.Unwrap()
	}
}
