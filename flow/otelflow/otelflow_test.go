package otelflow_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/flow/otelflow"
	"github.com/sluicemq/sluice/ports"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is an instrumented in-process broker with in-memory exporters.
type rig struct {
	t      *testing.T
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	tel    *otelflow.Telemetry
	broker *mem.Broker
	a      *mem.Adapter
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	var err error
	r.tel, err = otelflow.New(otelflow.WithTracerProvider(r.tp), otelflow.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	r.broker, _ = mem.NewBroker()
	r.a, err = mem.New(r.broker)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.a.Close(context.Background())
		_ = r.broker.Close(context.Background())
		_ = r.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return r
}

// settled counts terminal pipeline events and lets a test wait for n.
type settled struct{ ch chan struct{} }

func newSettled() *settled { return &settled{ch: make(chan struct{}, 1000)} }

func (s *settled) observe(e flow.Event) {
	if !e.Received {
		s.ch <- struct{}{}
	}
}

func (s *settled) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("only %d of %d deliveries completed within 10s", i, n)
		}
	}
}

type order struct {
	ID string `json:"id"`
}

func spansNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func TestDeliverySpansLinkToProducerAndRecordSettlement(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	spec := ports.SubscriptionSpec{Topic: "orders", Group: "billing",
		Retry: ports.RetryPolicy{MaxAttempts: 2, NoBackoff: true}}
	done := newSettled()
	p := flow.New(r.a, spec, flow.WithObserver(otelflow.Tee(r.tel.Observer(r.a, spec), done.observe)))
	orders := flow.Decode[order](otelflow.Trace(r.tel, p.Source()))
	sender := r.tel.Sender(r.a)
	handlerTracer := r.tp.Tracer("handler")
	flow.Sink(orders, func(ctx context.Context, o order) error {
		ctx, span := handlerTracer.Start(ctx, "handle "+o.ID)
		defer span.End()
		d := flow.DeliveryFrom(ctx)
		switch {
		case o.ID == "flaky" && d.RedeliveryCount == 0:
			return errors.New("database busy")
		case o.ID == "bad":
			return errors.New("card declined")
		}
		if o.ID == "ok" {
			// A message sent from the handler is a child of its span.
			return flow.Send(ctx, sender, "receipts", o)
		}
		return nil
	})
	// The handler sends receipts: keep them for a group (mem refuses a
	// message no subscription or declared group would keep).
	if err := ports.DeclareGroup(ctx, r.a, "receipts", "audit"); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}

	reqCtx, request := r.tp.Tracer("client").Start(ctx, "request")
	for _, id := range []string{"ok", "flaky", "bad"} {
		if err := flow.Send(reqCtx, sender, "orders", order{ID: id}, flow.Header(ports.HeaderID, id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sender.Send(reqCtx, ports.Message{Topic: "orders", Payload: []byte("{not json"), Headers: ports.NewHeaders(ports.HeaderID, "poison")}); err != nil {
		t.Fatal(err)
	}
	request.End()
	// ok 1, flaky 2 (requeue, ack), bad 2 (requeue, dead letter), poison 1.
	done.wait(t, 6)
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	ended := r.spans.Ended()
	sends := spansNamed(ended, "send orders")
	if len(sends) != 4 {
		t.Fatalf("%d producer spans for orders, want 4", len(sends))
	}
	producerOf := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range sends {
		if s.SpanKind() != trace.SpanKindProducer || s.Parent().SpanID() != request.SpanContext().SpanID() {
			t.Errorf("producer span %v: kind %v parent %v, want a producer child of the request", s.Name(), s.SpanKind(), s.Parent().SpanID())
		}
		producerOf[s.SpanContext().SpanID()] = s
	}

	byID := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spansNamed(ended, "process orders") {
		if s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("delivery span kind %v", s.SpanKind())
		}
		if len(s.Links()) != 1 {
			t.Fatalf("delivery span has %d links, want 1 (its producer)", len(s.Links()))
		}
		link := s.Links()[0].SpanContext
		if _, ok := producerOf[link.SpanID()]; !ok {
			t.Errorf("delivery span links to %v, not to a producer span", link.SpanID())
		}
		if s.Parent().SpanID() != link.SpanID() || s.SpanContext().TraceID() != request.SpanContext().TraceID() {
			t.Errorf("delivery span is not a child of its producer span in the request's trace")
		}
		id := attr(s, "messaging.message.id").AsString()
		byID[id] = append(byID[id], s)
	}
	type want struct {
		redelivery           int64
		outcome, disposition string
		errStatus            bool
		reason               string
	}
	expect := map[string][]want{
		"poison": {{0, "poisoned", "DEAD_LETTER", true, "decode"}},
		"flaky":  {{0, "failed", "REQUEUE", true, ""}, {1, "succeeded", "ACK", false, ""}},
		"bad":    {{0, "failed", "REQUEUE", true, ""}, {1, "failed", "DEAD_LETTER", true, "retries_exhausted"}},
	}
	seen := map[string]bool{}
	for name, ss := range byID {
		seen[name] = true
		if name == "ok" {
			if len(ss) != 1 || attr(ss[0], "sluice.disposition").AsString() != "ACK" || ss[0].Status().Code == codes.Error {
				t.Errorf("ok: %d spans, disposition %v", len(ss), attr(ss[0], "sluice.disposition"))
			}
			continue
		}
		sort.Slice(ss, func(i, j int) bool {
			return attr(ss[i], "sluice.redelivery_count").AsInt64() < attr(ss[j], "sluice.redelivery_count").AsInt64()
		})
		ws, ok := expect[name]
		if !ok || len(ss) != len(ws) {
			t.Fatalf("message %q: %d delivery spans, want %d", name, len(ss), len(ws))
		}
		for i, w := range ws {
			s := ss[i]
			if got := attr(s, "sluice.redelivery_count").AsInt64(); got != w.redelivery {
				t.Errorf("%s #%d: redelivery count %d, want %d", name, i, got, w.redelivery)
			}
			if got := attr(s, "sluice.outcome").AsString(); got != w.outcome {
				t.Errorf("%s #%d: outcome %q, want %q", name, i, got, w.outcome)
			}
			if got := attr(s, "sluice.disposition").AsString(); got != w.disposition {
				t.Errorf("%s #%d: disposition %q, want %q", name, i, got, w.disposition)
			}
			if (s.Status().Code == codes.Error) != w.errStatus {
				t.Errorf("%s #%d: status %v", name, i, s.Status())
			}
			if got := attr(s, "sluice.dead_letter.reason").AsString(); got != w.reason {
				t.Errorf("%s #%d: dead-letter reason %q, want %q", name, i, got, w.reason)
			}
		}
	}
	for _, name := range []string{"ok", "flaky", "bad", "poison"} {
		if !seen[name] {
			t.Errorf("no delivery spans found for %q", name)
		}
	}

	// The handler's span is a child of the delivery span (via Trace), and
	// the receipt it sent is a child of the handler's span.
	okHandle := spansNamed(ended, "handle ok")
	receipt := spansNamed(ended, "send receipts")
	if len(okHandle) != 1 || len(receipt) != 1 {
		t.Fatalf("handle ok: %d spans, send receipts: %d spans", len(okHandle), len(receipt))
	}
	if receipt[0].Parent().SpanID() != okHandle[0].SpanContext().SpanID() {
		t.Errorf("the receipt's producer span is not a child of the handler span")
	}
	if okHandle[0].Parent().SpanID() != byID["ok"][0].SpanContext().SpanID() {
		t.Errorf("the handler span is not a child of the delivery span")
	}

	checkMetrics(t, r.reader)
}

func checkMetrics(t *testing.T, reader *sdkmetric.ManualReader) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	sumBy := func(name string, key attribute.Key) map[string]int64 {
		out := map[string]int64{}
		data, ok := got[name].(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("metric %s missing or not an int64 sum: %T", name, got[name])
		}
		for _, dp := range data.DataPoints {
			label := "all"
			if key != "" {
				v, _ := dp.Attributes.Value(key)
				label = v.Emit()
			}
			out[label] += dp.Value
		}
		return out
	}
	settled := map[string]int64{}
	data := got["sluice.consumer.settled"].(metricdata.Sum[int64])
	for _, dp := range data.DataPoints {
		o, _ := dp.Attributes.Value("sluice.outcome")
		d, _ := dp.Attributes.Value("sluice.disposition")
		g, _ := dp.Attributes.Value("messaging.consumer.group.name")
		if g.AsString() != "billing" {
			t.Errorf("settled point without the group attribute: %v", dp.Attributes)
		}
		settled[o.AsString()+"/"+d.AsString()] += dp.Value
	}
	wantSettled := map[string]int64{"succeeded/ACK": 2, "failed/REQUEUE": 2, "poisoned/DEAD_LETTER": 1, "failed/DEAD_LETTER": 1}
	if fmt.Sprint(settled) != fmt.Sprint(wantSettled) {
		t.Errorf("settled = %v, want %v", settled, wantSettled)
	}
	if dl := sumBy("sluice.consumer.dead_letters", "sluice.dead_letter.reason"); fmt.Sprint(dl) != fmt.Sprint(map[string]int64{"decode": 1, "retries_exhausted": 1}) {
		t.Errorf("dead letters = %v", dl)
	}
	if inflight := sumBy("sluice.consumer.in_flight", ""); inflight["all"] != 0 {
		t.Errorf("in flight after stop = %v, want 0", inflight)
	}
	if prod := sumBy("sluice.producer.messages", "sluice.confirmed"); prod["true"] != 5 || prod["false"] != 0 {
		t.Errorf("producer messages = %v, want 5 confirmed (4 orders and 1 receipt)", prod)
	}
	redel, ok := got["sluice.consumer.redelivery_count"].(metricdata.Histogram[int64])
	if !ok || len(redel.DataPoints) != 1 || redel.DataPoints[0].Count != 6 || redel.DataPoints[0].Sum != 2 {
		t.Errorf("redelivery histogram = %+v, want 6 deliveries summing to 2 redeliveries", redel)
	}
	dur, ok := got["sluice.consumer.duration"].(metricdata.Histogram[float64])
	if !ok || len(dur.DataPoints) != 1 || dur.DataPoints[0].Count != 6 || dur.DataPoints[0].Sum <= 0 {
		t.Errorf("duration histogram = %+v, want 6 positive durations", dur)
	}
}
