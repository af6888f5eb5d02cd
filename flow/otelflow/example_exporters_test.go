package otelflow_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicemq/sluice/adapters/mem"
	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/flow/otelflow"
	"github.com/sluicemq/sluice/ports"
)

// runOrders runs a pipeline on the in-memory broker with tel's metrics
// and handles three deliveries, the last of them poison; it returns once
// all three are settled.
func runOrders(tel *otelflow.Telemetry) {
	ctx := context.Background()
	broker, _ := mem.NewBroker()
	defer broker.Close(ctx)
	a, _ := mem.New(broker)
	spec := ports.SubscriptionSpec{Topic: "orders", Group: "billing"}
	p := flow.New(a, spec, tel.Option(a, spec))
	handled := make(chan struct{}, 3)
	flow.Sink(flow.Decode[int](p.Source()), func(_ context.Context, total int) error {
		defer func() { handled <- struct{}{} }()
		if total < 0 {
			return ports.Poisonf("negative total %d", total)
		}
		return nil
	})
	_ = p.Start(ctx)
	for _, total := range []int{42, 7, -1} {
		_ = flow.Send(ctx, a, "orders", total)
	}
	for range 3 {
		<-handled
	}
	_ = p.Stop(ctx) // drains: every handled delivery is settled and recorded
}

// The OpenTelemetry Prometheus exporter as the meter provider's reader;
// promhttp.HandlerFor(reg, …) would serve the same registry (see
// docs/metrics.md).
func Example_prometheus() {
	reg := prometheus.NewRegistry()
	exporter, _ := otelprom.New(otelprom.WithRegisterer(reg))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	tel, _ := otelflow.New(otelflow.WithMeterProvider(mp))

	runOrders(tel)

	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == "sluice_consumer_dead_letters_total" || f.GetName() == "sluice_consumer_settled_total" {
			total := 0.0
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
			fmt.Println(f.GetName(), total)
		}
	}
	// Output:
	// sluice_consumer_dead_letters_total 1
	// sluice_consumer_settled_total 3
}

// namesEncoder prints the names of the instruments in each reading the
// stdout exporter hands it (its default encoder writes JSON).
type namesEncoder struct{}

func (namesEncoder) Encode(v any) error {
	rm, ok := v.(*metricdata.ResourceMetrics)
	if !ok {
		return fmt.Errorf("unexpected %T", v)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, m.Name)
		}
	}
	fmt.Println(strings.Join(names, " "))
	return nil
}

// The stdout exporter as the meter provider's reader; a periodic
// reader also exports on ForceFlush and at Shutdown.
func Example_stdout() {
	exporter, _ := stdoutmetric.New(stdoutmetric.WithEncoder(namesEncoder{}))
	reader := sdkmetric.NewPeriodicReader(exporter)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tel, _ := otelflow.New(otelflow.WithMeterProvider(mp))

	runOrders(tel)

	_ = mp.Shutdown(context.Background()) // a last reading, exported
	// Output:
	// sluice.consumer.in_flight sluice.consumer.settled sluice.consumer.redelivery_count sluice.consumer.duration sluice.consumer.dead_letters
}
