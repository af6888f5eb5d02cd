package schedule_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/operators/schedule"
)

// fill schedules n timers an hour away, spread over a minute.
func fill(b *testing.B, s *schedule.Scheduler, n int) {
	b.Helper()
	for i := range n {
		if _, err := s.After(time.Hour+time.Duration(i)*600*time.Microsecond, func() {}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScheduleCancelWith100kPending: one After plus one Cancel while
// 100k other timers are pending (ns/op is for the pair).
func BenchmarkScheduleCancelWith100kPending(b *testing.B) {
	s := schedule.New(schedule.Options{})
	defer s.Stop()
	fill(b, s, 100_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t, _ := s.After(time.Hour+time.Duration(i%100_000)*600*time.Microsecond, func() {})
		t.Cancel()
	}
}

// BenchmarkFill100k: scheduling 100k timers (ns/op per timer) and the
// memory they hold while pending (B/op per timer).
func BenchmarkFill100k(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s := schedule.New(schedule.Options{})
		fill(b, s, 100_000)
		if n := s.Stop(); n != 100_000 {
			b.Fatalf("stop cancelled %d", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100_000), "ns/timer")
}

// BenchmarkFire100k: 100k timers all due at once, fired by the one
// goroutine (ns/op per timer).
func BenchmarkFire100k(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		s := schedule.New(schedule.Options{})
		var fired atomic.Int32
		done := make(chan struct{})
		at := time.Now().Add(50 * time.Millisecond)
		for range 100_000 {
			_, _ = s.At(at, func() {
				if fired.Add(1) == 100_000 {
					close(done)
				}
			})
		}
		<-done
		total += time.Since(at)
		s.Stop()
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*100_000), "ns/fire")
}
