package otelflow_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/flow/otelflow"
	"github.com/sluicemq/sluice/ports"
)

// batchOf groups n deliveries into one item whose completion is the join
// of theirs (the way operators.Batch does).
func batchOf(n int, in flow.Stream[*ports.Delivery]) flow.Stream[[]*ports.Delivery] {
	return flow.Operate(in, func(ctx context.Context, src <-chan flow.Item[*ports.Delivery], out chan<- flow.Item[[]*ports.Delivery]) error {
		var held []flow.Item[*ports.Delivery]
		for it := range src {
			held = append(held, it)
			if len(held) < n {
				continue
			}
			ds := make([]*ports.Delivery, len(held))
			cs := make([]*flow.Completion, len(held))
			for i, h := range held {
				ds[i], cs[i] = h.Msg, h.Completion
			}
			out <- flow.Item[[]*ports.Delivery]{Ctx: ctx, Value: ds, Completion: flow.Join(cs...)}
			held = nil
		}
		for _, h := range held {
			_ = h.Completion.Cancel(ctx.Err())
		}
		return nil
	})
}

// Every record of a batch gets its own delivery span in its producer's
// trace, and the batch span links to each of them.
func TestBatchRecordsKeepTheirOwnTraces(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	spec := ports.SubscriptionSpec{Topic: "readings", Group: "ingest"}
	done := newSettled()
	p := flow.New(r.a, spec, flow.WithObserver(otelflow.Tee(r.tel.Observer(r.a, spec), done.observe)))
	batches := otelflow.TraceBatch(r.tel, batchOf(3, p.Source()), func(ds []*ports.Delivery) []*ports.Delivery { return ds })
	handler := r.tp.Tracer("handler")
	flow.Sink(batches, func(ctx context.Context, ds []*ports.Delivery) error {
		_, span := handler.Start(ctx, "write batch")
		span.End()
		return nil
	})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// Three producers, three traces.
	sender := r.tel.Sender(r.a)
	var roots []trace.SpanContext
	for i := 0; i < 3; i++ {
		pctx, root := r.tp.Tracer("device").Start(ctx, "device")
		if err := flow.Send(pctx, sender, "readings", i); err != nil {
			t.Fatal(err)
		}
		root.End()
		roots = append(roots, root.SpanContext())
	}
	done.wait(t, 3)
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	ended := r.spans.Ended()
	producers := spansNamed(ended, "send readings")
	deliveries := spansNamed(ended, "process readings")
	batch := spansNamed(ended, "process batch readings")
	if len(producers) != 3 || len(deliveries) != 3 || len(batch) != 1 {
		t.Fatalf("spans: %d producer, %d delivery, %d batch; want 3, 3, 1", len(producers), len(deliveries), len(batch))
	}
	traceOfRoot := map[trace.TraceID]bool{}
	for _, sc := range roots {
		traceOfRoot[sc.TraceID()] = true
	}
	producerByID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range producers {
		producerByID[s.SpanContext().SpanID()] = s
	}
	deliveryTraces := map[trace.TraceID]bool{}
	deliveryIDs := map[trace.SpanID]bool{}
	for _, d := range deliveries {
		if len(d.Links()) != 1 {
			t.Fatalf("delivery span has %d links, want its producer", len(d.Links()))
		}
		prod, ok := producerByID[d.Links()[0].SpanContext.SpanID()]
		if !ok || d.Parent().SpanID() != prod.SpanContext().SpanID() {
			t.Errorf("delivery span is not linked to and a child of a producer span")
		}
		if !traceOfRoot[d.SpanContext().TraceID()] {
			t.Errorf("delivery span is not in its device's trace")
		}
		if attr(d, "sluice.disposition").AsString() != "ACK" {
			t.Errorf("delivery disposition %v, want ACK (the batch succeeded)", attr(d, "sluice.disposition"))
		}
		deliveryTraces[d.SpanContext().TraceID()] = true
		deliveryIDs[d.SpanContext().SpanID()] = true
	}
	if len(deliveryTraces) != 3 {
		t.Errorf("the three records share traces: %d distinct", len(deliveryTraces))
	}

	b := batch[0]
	var toDelivery, toProducer int
	for _, l := range b.Links() {
		var kind string
		for _, kv := range l.Attributes {
			if kv.Key == attribute.Key("sluice.link") {
				kind = kv.Value.AsString()
			}
		}
		switch {
		case kind == "delivery" && deliveryIDs[l.SpanContext.SpanID()]:
			toDelivery++
		case kind == "producer" && producerByID[l.SpanContext.SpanID()] != nil:
			toProducer++
		default:
			t.Errorf("unexpected batch link %v %q", l.SpanContext.SpanID(), kind)
		}
	}
	if toDelivery != 3 || toProducer != 3 {
		t.Errorf("batch span links: %d to deliveries, %d to producers; want 3 and 3", toDelivery, toProducer)
	}
	if got := attr(b, "messaging.batch.message_count").AsInt64(); got != 3 {
		t.Errorf("batch message count %d", got)
	}
	for _, d := range deliveries {
		if b.EndTime().Before(d.EndTime()) {
			t.Errorf("the batch span ended before a member was settled")
		}
	}
	hs := spansNamed(ended, "write batch")
	if len(hs) != 1 || hs[0].Parent().SpanID() != b.SpanContext().SpanID() {
		t.Errorf("the handler span is not a child of the batch span")
	}
}
