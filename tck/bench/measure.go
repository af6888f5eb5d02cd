package main

import (
	"runtime"
	"slices"
	"sync"
	"time"
)

// Latencies collects publish-to-settle latencies from many goroutines.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one latency.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// Percentiles returns p50 and p99.
func (l *Latencies) Percentiles() (p50, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0, 0
	}
	slices.Sort(l.d)
	return l.d[len(l.d)*50/100], l.d[min(len(l.d)-1, len(l.d)*99/100)]
}

// Meter measures elapsed time and heap allocations between Start and Stop.
type Meter struct {
	start  time.Time
	allocs uint64
}

// Start begins a measurement (after a GC, so earlier garbage is not counted).
func (m *Meter) Start() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.allocs = ms.Mallocs
	m.start = time.Now()
}

// Stop returns the elapsed time and allocations per delivery.
func (m *Meter) Stop(deliveries int) (time.Duration, float64) {
	el := time.Since(m.start)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return el, float64(ms.Mallocs-m.allocs) / float64(max(deliveries, 1))
}
