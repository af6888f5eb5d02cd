package otelflow

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Trace is a pass-through stage that puts each item's delivery span into
// the item's context, so the spans the handler starts and the messages it
// sends are children of the delivery span. Place it right after
// Pipeline.Source (or anywhere items still have their Msg). Items without
// a delivery (batches) pass unchanged. The pipeline must be observed by
// t (Telemetry.Option).
func Trace[T any](t *Telemetry, in flow.Stream[T], opts ...flow.StageOption) flow.Stream[T] {
	return flow.Via(in, func(it flow.Item[T], emit flow.Emit[T]) {
		if it.Msg != nil {
			if span := t.spanOf(it.Msg); span != nil {
				it.Ctx = trace.ContextWithSpan(it.Ctx, span)
			}
		}
		emit(it)
	}, opts...)
}

// Context returns ctx with the span of the delivery ctx belongs to
// (flow.DeliveryFrom), for handlers of pipelines without the Trace stage.
// It returns ctx unchanged when there is none.
func (t *Telemetry) Context(ctx context.Context) context.Context {
	if d := flow.DeliveryFrom(ctx); d != nil {
		if span := t.spanOf(d); span != nil {
			return trace.ContextWithSpan(ctx, span)
		}
	}
	return ctx
}

// StartBatch starts a span for handling msgs as one batch, a child of
// ctx's span, linked to the span of every member (each member keeps its
// own delivery span, in its producer's trace) and to each member's
// producer span. The caller ends it.
func (t *Telemetry) StartBatch(ctx context.Context, msgs []*ports.Delivery) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, 2*len(msgs))
	var topic string
	for _, d := range msgs {
		if d == nil {
			continue
		}
		topic = string(d.Topic)
		if span := t.spanOf(d); span != nil {
			links = append(links, trace.Link{SpanContext: span.SpanContext(), Attributes: []attribute.KeyValue{
				attribute.String("sluice.link", "delivery"), semconv.MessagingMessageID(d.ID)}})
		}
		if psc := trace.SpanContextFromContext(t.propagator.Extract(context.Background(), carrier{&d.Headers})); psc.IsValid() {
			links = append(links, trace.Link{SpanContext: psc, Attributes: []attribute.KeyValue{
				attribute.String("sluice.link", "producer"), semconv.MessagingMessageID(d.ID)}})
		}
	}
	return t.tracer.Start(ctx, "process batch "+topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(topic),
			semconv.MessagingBatchMessageCount(len(msgs)),
		),
	)
}

// TraceBatch is a pass-through stage for batch items: it starts a batch
// span (as StartBatch, with members(value) as the members) and puts it
// into the item's context. The span ends when the last member's delivery
// is settled (or completes without settlement), so it covers the handler
// and the settlement of the whole batch.
func TraceBatch[T any](t *Telemetry, in flow.Stream[T], members func(T) []*ports.Delivery, opts ...flow.StageOption) flow.Stream[T] {
	return flow.Via(in, func(it flow.Item[T], emit flow.Emit[T]) {
		msgs := members(it.Value)
		ctx, span := t.StartBatch(it.Ctx, msgs)
		b := &batchSpan{span: span, pending: 1} // 1: this stage's hold
		t.mu.Lock()
		for _, d := range msgs {
			if ds := t.spans[d]; ds != nil {
				ds.batches = append(ds.batches, b)
				b.pending++
			}
		}
		t.mu.Unlock()
		b.memberDone(time.Now()) // members settled from here on end it
		it.Ctx = ctx
		emit(it)
	}, opts...)
}

// batchSpan ends its span when its last member settled.
type batchSpan struct {
	span    trace.Span
	mu      sync.Mutex
	pending int
}

func (b *batchSpan) memberDone(at time.Time) {
	b.mu.Lock()
	b.pending--
	last := b.pending == 0
	b.mu.Unlock()
	if last {
		b.span.End(trace.WithTimestamp(at))
	}
}
