package main

import (
	"cmp"
	"context"
	"fmt"
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

// rounds runs every contender cfg.Rounds times, alternating them so that
// load from other processes hits each alike, and returns for each the
// round with the median throughput.
func rounds(ctx context.Context, cfg Config, contenders ...func(context.Context, Config) (Result, error)) ([]Result, error) {
	all := make([][]Result, len(contenders))
	for range max(cfg.Rounds, 1) {
		for i, run := range contenders {
			r, err := run(ctx, cfg)
			if err != nil {
				return nil, err
			}
			all[i] = append(all[i], r)
		}
	}
	out := make([]Result, len(contenders))
	for i, rs := range all {
		slices.SortFunc(rs, func(a, b Result) int { return cmp.Compare(a.Rate(), b.Rate()) })
		out[i] = rs[len(rs)/2]
		out[i].Note = fmt.Sprintf("%s (median of %d)", out[i].Note, len(rs))
	}
	return out, nil
}
