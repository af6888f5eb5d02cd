package otelflow

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// deliverySpan is the state of one received delivery.
type deliverySpan struct {
	span     trace.Span
	received time.Time
	batches  []*batchSpan // batch spans waiting for this member to settle (under Telemetry.mu)
}

// pipelineAttrs are the attributes shared by a pipeline's metrics.
type pipelineAttrs struct {
	set   attribute.Set
	attrs []attribute.KeyValue
}

// Observer returns the function to pass to flow.WithObserver for a
// pipeline consuming spec from adapter: it starts and ends the delivery
// spans and records the consumer metrics. Use Option unless the pipeline
// needs an observer of its own as well (see Tee).
func (t *Telemetry) Observer(adapter ports.Adapter, spec ports.SubscriptionSpec) func(flow.Event) {
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemKey.String(systemName(adapter.Name())),
		semconv.MessagingDestinationName(string(spec.Topic)),
		semconv.MessagingConsumerGroupName(spec.Group),
	}
	pa := &pipelineAttrs{set: attribute.NewSet(attrs...), attrs: attrs}
	return func(e flow.Event) {
		if e.Received {
			t.received(pa, e.Delivery)
			return
		}
		t.completed(pa, e)
	}
}

// Option returns flow.WithObserver(t.Observer(adapter, spec)).
func (t *Telemetry) Option(adapter ports.Adapter, spec ports.SubscriptionSpec) flow.Option {
	return flow.WithObserver(t.Observer(adapter, spec))
}

// Tee returns an observer that calls each of fs in turn, for a pipeline
// with more than one observer.
func Tee(fs ...func(flow.Event)) func(flow.Event) {
	return func(e flow.Event) {
		for _, f := range fs {
			f(e)
		}
	}
}

func (t *Telemetry) received(pa *pipelineAttrs, d *ports.Delivery) {
	producer := t.propagator.Extract(context.Background(), carrier{&d.Headers})
	psc := trace.SpanContextFromContext(producer)
	parent := context.Background()
	var links []trace.Link
	if psc.IsValid() {
		links = append(links, trace.Link{SpanContext: psc, Attributes: []attribute.KeyValue{attribute.String("sluice.link", "producer")}})
		if t.childOfSend {
			parent = producer
		}
	}
	at := d.ReceivedAt
	if at.IsZero() {
		at = time.Now()
	}
	attrs := make([]attribute.KeyValue, 0, len(pa.attrs)+4)
	attrs = append(attrs, pa.attrs...)
	attrs = append(attrs,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingMessageID(d.ID),
		semconv.MessagingMessageBodySize(len(d.Payload)),
		AttrRedeliveryCount.Int(d.RedeliveryCount),
	)
	_, span := t.tracer.Start(parent, "process "+string(d.Topic),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(at),
		trace.WithLinks(links...),
		trace.WithAttributes(attrs...),
	)
	t.mu.Lock()
	t.spans[d] = &deliverySpan{span: span, received: at}
	t.mu.Unlock()

	ctx := context.Background()
	set := metric.WithAttributeSet(pa.set)
	t.m.inFlight.Add(ctx, 1, set)
	t.m.redelivery.Record(ctx, int64(d.RedeliveryCount), set)
}

func (t *Telemetry) completed(pa *pipelineAttrs, e flow.Event) {
	t.mu.Lock()
	ds, ok := t.spans[e.Delivery]
	delete(t.spans, e.Delivery)
	var batches []*batchSpan
	if ok {
		batches, ds.batches = ds.batches, nil
	}
	t.mu.Unlock()

	ctx := context.Background()
	outcome, disposition := e.Outcome.Kind.String(), dispositionName(e.Action)
	settleFailed := e.Err != nil
	if settleFailed {
		disposition = "unsettled"
	}
	t.m.settled.Add(ctx, 1, metric.WithAttributeSet(pa.set),
		metric.WithAttributes(AttrOutcome.String(outcome), AttrDisposition.String(disposition)))
	if e.Action == ports.DeadLetter {
		t.m.deadLetters.Add(ctx, 1, metric.WithAttributeSet(pa.set),
			metric.WithAttributes(AttrDeadLetterReason.String(deadLetterReason(e.Outcome))))
	}
	if !ok {
		// Received from the adapter but never handed to the pipeline (it
		// was stopping): no Received event, so no span and no in-flight.
		return
	}
	now := time.Now()
	t.m.inFlight.Add(ctx, -1, metric.WithAttributeSet(pa.set))
	t.m.duration.Record(ctx, now.Sub(ds.received).Seconds(), metric.WithAttributeSet(pa.set))

	span := ds.span
	span.SetAttributes(AttrOutcome.String(outcome), AttrDisposition.String(disposition))
	switch {
	case settleFailed:
		span.SetAttributes(AttrSettleError.Bool(true))
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, "settlement failed: left unsettled")
	case e.Outcome.Kind == flow.Failed || e.Outcome.Kind == flow.Poisoned:
		if e.Outcome.Err != nil {
			span.RecordError(e.Outcome.Err)
		}
		span.SetStatus(codes.Error, outcome)
	}
	if e.Action == ports.DeadLetter {
		span.SetAttributes(AttrDeadLetterReason.String(deadLetterReason(e.Outcome)))
	}
	span.End(trace.WithTimestamp(now))
	for _, b := range batches {
		b.memberDone(now)
	}
}

// spanOf returns the span of a delivery in flight, or nil.
func (t *Telemetry) spanOf(d *ports.Delivery) trace.Span {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ds := t.spans[d]; ds != nil {
		return ds.span
	}
	return nil
}
