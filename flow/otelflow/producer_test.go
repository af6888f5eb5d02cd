package otelflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/flow/otelflow"
	"github.com/sluicemq/sluice/ports"
)

func TestInjectWritesTraceparent(t *testing.T) {
	r := newRig(t)
	ctx, span := r.tp.Tracer("t").Start(context.Background(), "op")
	defer span.End()
	m, err := flow.NewMessage(ctx, "orders", 1, r.tel.Inject(ctx))
	if err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext()
	want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
	if got := m.Headers.Get(ports.HeaderTraceParent); got != want {
		t.Fatalf("traceparent = %q, want %q", got, want)
	}
	none, _ := flow.NewMessage(context.Background(), "orders", 1, r.tel.Inject(context.Background()))
	if _, ok := none.Headers.Lookup(ports.HeaderTraceParent); ok {
		t.Fatalf("a context without a span wrote traceparent")
	}
}

func TestSenderDoesNotTouchCallerHeadersAndReportsUnconfirmed(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	sender := r.tel.Sender(r.a)
	if err := ports.DeclareGroup(ctx, r.a, "t", "g"); err != nil { // somewhere to keep the messages
		t.Fatal(err)
	}
	h := ports.NewHeaders("x", "1")
	if err := sender.Send(ctx, ports.Message{Topic: "t", Payload: []byte("1"), Headers: h}); err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 {
		t.Fatalf("Sender modified the caller's headers: %v", h)
	}

	r.broker.FailSends(true)
	err := sender.Send(ctx, ports.Message{Topic: "t", Payload: []byte("2")})
	if !errors.Is(err, ports.ErrUnconfirmed) {
		t.Fatalf("Send with failing broker = %v", err)
	}
	r.broker.FailSends(false)
	spans := spansNamed(r.spans.Ended(), "send t")
	if len(spans) != 2 || spans[0].Status().Code == codes.Error || spans[1].Status().Code != codes.Error {
		t.Fatalf("producer spans = %d, statuses %v / %v; want the second in error", len(spans), spans[0].Status(), spans[len(spans)-1].Status())
	}
}

// With LinkOnly a delivery span starts a new trace and is only linked to
// its producer.
func TestLinkOnly(t *testing.T) {
	r := newRig(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tel, err := otelflow.New(otelflow.WithTracerProvider(tp), otelflow.WithMeterProvider(sdkmetric.NewMeterProvider()), otelflow.LinkOnly())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	spec := ports.SubscriptionSpec{Topic: "t", Group: "g"}
	done := newSettled()
	p := flow.New(r.a, spec, flow.WithObserver(otelflow.Tee(tel.Observer(r.a, spec), done.observe)))
	flow.Sink(p.Source(), func(context.Context, *ports.Delivery) error { return nil })
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pctx, root := tp.Tracer("t").Start(ctx, "root")
	if err := flow.Send(pctx, tel.Sender(r.a), "t", 1); err != nil {
		t.Fatal(err)
	}
	root.End()
	done.wait(t, 1)
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ds := spansNamed(rec.Ended(), "process t")
	if len(ds) != 1 || ds[0].Parent().IsValid() || len(ds[0].Links()) != 1 || ds[0].Links()[0].SpanContext.TraceID() != root.SpanContext().TraceID() {
		t.Fatalf("LinkOnly delivery span: %d spans, parent valid %v, links %v", len(ds), ds[0].Parent().IsValid(), ds[0].Links())
	}
}

// A delivery cancelled by Stop ends its span with no disposition, and the
// in-flight gauge returns to zero.
func TestStopCancelsWithoutSettlement(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	spec := ports.SubscriptionSpec{Topic: "slow", Group: "g"}
	p := flow.New(r.a, spec, r.tel.Option(r.a, spec))
	started := make(chan struct{})
	flow.Sink(p.Source(), func(ctx context.Context, _ *ports.Delivery) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := flow.Send(ctx, r.a, "slow", 1); err != nil {
		t.Fatal(err)
	}
	<-started
	var rm metricdata.ResourceMetrics
	_ = r.reader.Collect(ctx, &rm)
	if got := int64Sum(rm, "sluice.consumer.in_flight"); got != 1 {
		t.Fatalf("in flight while handling = %d, want 1", got)
	}
	stopCtx, cancel := context.WithCancel(ctx)
	cancel() // no drain: cancel in-flight work at once
	_ = p.Stop(stopCtx)
	ds := spansNamed(r.spans.Ended(), "process slow")
	if len(ds) != 1 || attr(ds[0], "sluice.outcome").AsString() != "cancelled" || attr(ds[0], "sluice.disposition").AsString() != "none" {
		t.Fatalf("cancelled delivery span: %d spans, attributes %v", len(ds), ds[0].Attributes())
	}
	rm = metricdata.ResourceMetrics{}
	_ = r.reader.Collect(ctx, &rm)
	if got := int64Sum(rm, "sluice.consumer.in_flight"); got != 0 {
		t.Fatalf("in flight after stop = %d, want 0", got)
	}
}

func int64Sum(rm metricdata.ResourceMetrics, name string) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range s.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}
