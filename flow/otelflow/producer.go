package otelflow

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// Inject returns a flow.NewMessage option that writes the span context of
// ctx into the message's envelope (W3C traceparent and tracestate, or the
// WithPropagator format). Use it when sending without Sender; nothing is
// written when ctx has no span.
func (t *Telemetry) Inject(ctx context.Context) flow.MessageOption {
	return func(m *ports.Message) {
		t.propagator.Inject(ctx, carrier{&m.Headers})
	}
}

// Sender wraps s so that every message sent gets a producer span, "send
// <topic>", a child of the caller's span (or, when the caller has none,
// of the trace context the message already carries), and carries that
// span's context in its envelope. The caller's messages and headers are
// not modified: each is sent as a copy. A message the broker did not
// confirm ends its span with an error. The sluice.producer.messages
// counter records each message by whether it was confirmed.
func (t *Telemetry) Sender(s ports.Sender) ports.Sender {
	system := "sluice"
	if n, ok := s.(interface{ Name() string }); ok {
		system = systemName(n.Name())
	}
	return &sender{t: t, next: s, system: system}
}

type sender struct {
	t      *Telemetry
	next   ports.Sender
	system string
}

func (s *sender) Send(ctx context.Context, msgs ...ports.Message) error {
	t := s.t
	out := make([]ports.Message, len(msgs))
	spans := make([]trace.Span, len(msgs))
	callerHasSpan := trace.SpanContextFromContext(ctx).IsValid()
	for i, m := range msgs {
		h := m.Headers.Clone()
		parent := ctx
		if !callerHasSpan {
			parent = t.propagator.Extract(ctx, carrier{&h})
		}
		_, span := t.tracer.Start(parent, "send "+string(m.Topic),
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				semconv.MessagingSystemKey.String(s.system),
				semconv.MessagingOperationTypeSend,
				semconv.MessagingDestinationName(string(m.Topic)),
				semconv.MessagingMessageBodySize(len(m.Payload)),
			))
		if id := h.Get(ports.HeaderID); id != "" {
			span.SetAttributes(semconv.MessagingMessageID(id))
		}
		t.propagator.Inject(trace.ContextWithSpan(ctx, span), carrier{&h})
		m.Headers = h
		out[i], spans[i] = m, span
	}
	err := s.next.Send(ctx, out...)
	failed := map[int]error{}
	if err != nil {
		for _, e := range unjoin(err) {
			var se *ports.SendError
			if errors.As(e, &se) && se.Index >= 0 && se.Index < len(msgs) {
				failed[se.Index] = se
			}
		}
		if len(failed) == 0 { // not per message: every message failed
			for i := range msgs {
				failed[i] = err
			}
		}
	}
	for i, span := range spans {
		confirmed := failed[i] == nil
		if !confirmed {
			span.RecordError(failed[i])
			span.SetStatus(codes.Error, "not confirmed")
		}
		span.End()
		t.m.produced.Add(ctx, 1, metric.WithAttributes(
			semconv.MessagingSystemKey.String(s.system),
			semconv.MessagingDestinationName(string(msgs[i].Topic)),
			AttrConfirmed.Bool(confirmed)))
	}
	return err
}

// unjoin flattens errors.Join trees.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}
