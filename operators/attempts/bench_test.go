package attempts_test

import (
	"strconv"
	"testing"

	"github.com/sluicemq/sluice/operators/attempts"
)

func BenchmarkAddGetForget(b *testing.B) {
	c := attempts.New(attempts.Options{MaxEntries: 10_000})
	ids := make([]string, 50_000)
	for i := range ids {
		ids[i] = "m" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ids[i%len(ids)]
		c.Add(id)
		_ = c.Get(id)
		if i%3 == 0 {
			c.Forget(id)
		}
	}
}
