package ports

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendRFC3339NanoMatchesFormat: the cached-second formatter writes
// exactly what time.RFC3339Nano writes, for times in one second and across
// seconds, zones, whole seconds, trailing zeros and years outside 0..9999.
func TestAppendRFC3339NanoMatchesFormat(t *testing.T) {
	base := time.Date(2026, 12, 2, 5, 37, 12, 0, time.UTC)
	times := []time.Time{
		base,
		base.Add(1),
		base.Add(100 * time.Millisecond),
		base.Add(120 * time.Microsecond),
		base.Add(999999999),
		base.Add(time.Second),
		base.In(time.FixedZone("X", -7200)).Add(123456789),
		time.Date(-1, 1, 1, 0, 0, 0, 5, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 5, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		{},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		// Many draws within a few seconds, so the cache is hit and missed.
		times = append(times, base.Add(time.Duration(r.Int64N(int64(3*time.Second)))))
	}
	for _, at := range times {
		want := at.UTC().Format(time.RFC3339Nano)
		if got := string(AppendTime(nil, at)); got != want {
			t.Fatalf("%v: %q, want %q", at, got, want)
		}
		if got := string(AppendTime([]byte("id-"), at)); got != "id-"+want {
			t.Fatalf("%v after a prefix: %q, want %q", at, got, "id-"+want)
		}
	}
}
