package otelflow

import (
	"go.opentelemetry.io/otel/propagation"

	"github.com/sluicemq/sluice/ports"
)

// carrier reads and writes trace context in envelope headers.
type carrier ports.Headers

var _ propagation.TextMapCarrier = carrier(nil)

func (c carrier) Get(key string) string { return c[key] }

func (c carrier) Set(key, value string) { c[key] = value }

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
