package kit_test

import (
	"testing"
	"time"

	"github.com/sluicemq/sluice/adapters/kit"
	"github.com/sluicemq/sluice/ports"
)

// The not-before header has one meaning in every adapter: the kit reads
// the Kafka adapter's RFC 3339 form as well as its own milliseconds.
func TestTakeNotBeforeReadsBothForms(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 500_000_000, time.UTC)
	for _, v := range []string{"1796126400500", at.Format(time.RFC3339Nano)} {
		h := ports.NewHeaders(kit.HeaderNotBefore, v)
		got, err := kit.TakeNotBefore(&h)
		if err != nil || !got.Equal(at) {
			t.Fatalf("TakeNotBefore(%q) = %v, %v; want %v", v, got, err, at)
		}
		if _, ok := h.Lookup(kit.HeaderNotBefore); ok {
			t.Fatalf("TakeNotBefore(%q) left the header in place", v)
		}
	}
	bad := ports.NewHeaders(kit.HeaderNotBefore, "soon")
	if _, err := kit.TakeNotBefore(&bad); err == nil {
		t.Fatal("a malformed value was accepted")
	}
}
