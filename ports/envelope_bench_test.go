package ports_test

import (
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// BenchmarkStamp is one Send's stamping of a message built by
// flow.NewMessage (type and content type) plus one user header, each with
// its own clock reading, as a Send of one message makes.
func BenchmarkStamp(b *testing.B) {
	h := ports.NewHeaders(ports.HeaderType, "main.order", ports.HeaderContentType, "application/json", "x-index", "42")
	b.ReportAllocs()
	for b.Loop() {
		m := ports.Message{Topic: "bench", Headers: h}
		m.Stamp(time.Now())
	}
}
