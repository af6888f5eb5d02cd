package ports_test

import (
	"testing"

	"github.com/sluicemq/sluice/ports"
)

// BenchmarkStamp is one Send's stamping of a message made without
// flow.NewMessage (a content type and one user header, no id).
func BenchmarkStamp(b *testing.B) {
	h := ports.NewHeaders(ports.HeaderContentType, "application/json", "x-index", "42")
	b.ReportAllocs()
	for b.Loop() {
		m := ports.Message{Topic: "bench", Headers: h}
		m.Stamp()
	}
}
