package otelflow

import (
	"go.opentelemetry.io/otel/propagation"

	"github.com/sluicemq/sluice/ports"
)

// carrier reads and writes trace context in envelope headers.
type carrier struct{ h *ports.Headers }

var _ propagation.TextMapCarrier = carrier{}

func (c carrier) Get(key string) string { return c.h.Get(key) }

func (c carrier) Set(key, value string) { c.h.Set(key, value) }

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(*c.h))
	for _, x := range *c.h {
		keys = append(keys, x.Name)
	}
	return keys
}
