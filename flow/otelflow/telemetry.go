package otelflow

import (
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemq/sluice/ports"
)

// instrumentationName names the tracer and meter.
const instrumentationName = "github.com/sluicemq/sluice/flow/otelflow"

// Telemetry instruments pipelines and senders. One Telemetry serves any
// number of pipelines; it is safe for concurrent use.
type Telemetry struct {
	tracer      trace.Tracer
	propagator  propagation.TextMapPropagator
	m           *instruments
	childOfSend bool

	mu    sync.Mutex
	spans map[*ports.Delivery]*deliverySpan // received and not yet completed
}

// Option configures New.
type Option func(*config)

type config struct {
	tp         trace.TracerProvider
	mp         metric.MeterProvider
	propagator propagation.TextMapPropagator
	linkOnly   bool
}

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithMeterProvider sets where metrics go. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithPropagator sets how span context travels in the envelope. Default:
// W3C trace context (traceparent, tracestate), whatever the global
// propagator is.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.propagator = p
		}
	}
}

// LinkOnly makes each delivery span a new trace root that is only linked
// to its producer span, instead of a child of it that is also linked.
// Default: child and link.
func LinkOnly() Option { return func(c *config) { c.linkOnly = true } }

// New returns a Telemetry. It fails only when an instrument cannot be
// created by the meter provider.
func New(opts ...Option) (*Telemetry, error) {
	c := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider(), propagator: propagation.TraceContext{}}
	for _, o := range opts {
		o(&c)
	}
	m, err := newInstruments(c.mp.Meter(instrumentationName))
	if err != nil {
		return nil, err
	}
	return &Telemetry{
		tracer:      c.tp.Tracer(instrumentationName),
		propagator:  c.propagator,
		m:           m,
		childOfSend: !c.linkOnly,
		spans:       map[*ports.Delivery]*deliverySpan{},
	}, nil
}

// systemName maps an adapter name onto the messaging.system value of the
// OpenTelemetry conventions where one exists.
func systemName(adapter string) string {
	switch adapter {
	case "amqp":
		return "rabbitmq"
	case "":
		return "sluice"
	}
	return adapter
}
