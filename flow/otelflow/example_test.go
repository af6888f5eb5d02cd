package otelflow_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/flow/otelflow"
	"github.com/sluicemq/sluice/ports"
)

func Example() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tel, _ := otelflow.New(otelflow.WithTracerProvider(tp), otelflow.WithMeterProvider(sdkmetric.NewMeterProvider()))

	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	a, _ := mem.New(broker)

	spec := ports.SubscriptionSpec{Topic: "orders", Group: "billing"}
	p := flow.New(a, spec, tel.Option(a, spec))
	done := make(chan struct{})
	flow.Sink(otelflow.Trace(tel, p.Source()), func(ctx context.Context, d *ports.Delivery) error {
		close(done)
		return nil
	})
	_ = p.Start(ctx)

	reqCtx, request := tp.Tracer("api").Start(ctx, "POST /orders")
	_ = flow.Send(reqCtx, tel.Sender(a), "orders", map[string]int{"total": 42})
	request.End()
	<-done
	_ = p.Stop(ctx) // the delivery is settled (ACK) and its span ended

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		byName[s.Name()] = s
	}
	send, process := byName["send orders"], byName["process orders"]
	fmt.Println(send.SpanKind(), "child of the request:", send.Parent().SpanID() == request.SpanContext().SpanID())
	fmt.Println(process.SpanKind(), "child of and linked to the producer:",
		process.Parent().SpanID() == send.SpanContext().SpanID(),
		process.Links()[0].SpanContext.SpanID() == send.SpanContext().SpanID())
	for _, kv := range process.Attributes() {
		if kv.Key == otelflow.AttrDisposition {
			fmt.Println("disposition:", kv.Value.AsString())
		}
	}
	// Output:
	// producer child of the request: true
	// consumer child of and linked to the producer: true true
	// disposition: ACK
}
