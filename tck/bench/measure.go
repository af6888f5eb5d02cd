package main

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// seqHeader carries a message's index (0..N-1) so that every contender can
// verify it settled exactly N distinct messages; sentHeader carries the
// publish time (Unix nanoseconds) for latency contenders.
const (
	seqHeader  = "bench-seq"
	sentHeader = "bench-sent"
)

// tally records which of N messages were settled. A contender marks a
// message after its settlement was accepted (for raw clients: after the
// ack/mark call returned; for sluice: from the pipeline observer, which
// fires after Settle returned). A run passes only when every index 0..N-1
// was marked and nothing else was; redeliveries are counted, not failed.
type tally struct {
	n        int64
	seen     []atomic.Bool
	distinct atomic.Int64
	dups     atomic.Int64
	bad      atomic.Int64
	done     chan struct{}
}

func newTally(n int) *tally {
	return &tally{n: int64(n), seen: make([]atomic.Bool, n), done: make(chan struct{})}
}

// mark records message i as settled.
func (t *tally) mark(i int) {
	if i < 0 || int64(i) >= t.n {
		t.bad.Add(1)
		return
	}
	if !t.seen[i].CompareAndSwap(false, true) {
		t.dups.Add(1)
		return
	}
	if t.distinct.Add(1) == t.n {
		close(t.done)
	}
}

// markHeaders marks the message whose index is in h[seqHeader].
func (t *tally) markHeaders(h ports.Headers) {
	i, err := strconv.Atoi(h.Get(seqHeader))
	if err != nil {
		t.bad.Add(1)
		return
	}
	t.mark(i)
}

// wait blocks until all N were settled or ctx ends.
func (t *tally) wait(ctx context.Context, name string) error {
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: only %d of %d distinct messages settled (%d redelivered, %d foreign): %w",
			name, t.distinct.Load(), t.n, t.dups.Load(), t.bad.Load(), ctx.Err())
	}
}

// check fails unless exactly N distinct messages, and nothing foreign, were settled.
func (t *tally) check(name string) error {
	if d, b := t.distinct.Load(), t.bad.Load(); d != t.n || b != 0 {
		return fmt.Errorf("%s: settled %d distinct messages of %d and %d foreign ones: the contender is broken, its figure is void", name, d, t.n, b)
	}
	return nil
}

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

// AddSince records the latency of a message whose sentHeader is in h.
func (l *Latencies) AddSince(h ports.Headers) {
	if ns, err := strconv.ParseInt(h.Get(sentHeader), 10, 64); err == nil {
		l.Add(time.Duration(time.Now().UnixNano() - ns))
	}
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

// Meter measures one contender's timed section: elapsed time, heap
// allocations, the peak of live heap objects (sampled every 10ms with
// runtime/metrics, which does not stop the world) and settled messages per
// wall-clock second.
type Meter struct {
	t       *tally
	created time.Time
	startNS atomic.Int64
	// Process and broker CPU time at begin (set once, by the begin that
	// started the clock, before startNS is published).
	cpu0, brokerCPU0 time.Duration
	allocs0          uint64
	stop             chan struct{}
	wg               sync.WaitGroup
	peak             atomic.Uint64
	perSec           []int64
	once             sync.Once
}

var metricNames = []string{"/gc/heap/allocs:objects", "/memory/classes/heap/objects:bytes"}

func readMetrics() (allocs, heap uint64) {
	s := []metrics.Sample{{Name: metricNames[0]}, {Name: metricNames[1]}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// newMeter prepares a measurement after a GC (so earlier garbage is not
// counted). The clock starts at begin — called on the first delivery
// received, so subscribing and group joins are not timed — or at once if
// begin is never called.
func newMeter(t *tally) *Meter {
	runtime.GC()
	m := &Meter{t: t, stop: make(chan struct{}), created: time.Now()}
	m.allocs0, _ = readMetrics()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var next time.Time
		var last int64
		for {
			select {
			case <-m.stop:
				return
			case now := <-tick.C:
				if _, h := readMetrics(); h > m.peak.Load() {
					m.peak.Store(h)
				}
				s := m.startNS.Load()
				if s == 0 {
					continue
				}
				if next.IsZero() {
					next = time.Unix(0, s).Add(time.Second)
				}
				if !now.Before(next) {
					d := t.distinct.Load()
					m.perSec = append(m.perSec, d-last)
					last = d
					next = next.Add(time.Second)
				}
			}
		}
	}()
	return m
}

// begin starts the clock (once; later calls do nothing). Safe from any
// goroutine.
func (m *Meter) begin() {
	if m.startNS.Load() != 0 {
		return
	}
	m.once.Do(func() {
		m.cpu0, m.brokerCPU0 = processCPU(), brokerCPU()
		m.startNS.Store(time.Now().UnixNano())
	})
}

// finish ends the timed section and returns its Result (Name and Note
// are the caller's). It fails unless the tally is complete.
func (m *Meter) finish(name string) (Result, error) {
	m.begin()
	el := time.Since(time.Unix(0, m.startNS.Load()))
	cpu, bcpu := processCPU()-m.cpu0, brokerCPU()-m.brokerCPU0
	close(m.stop)
	m.wg.Wait()
	allocs, h := readMetrics()
	if h > m.peak.Load() {
		m.peak.Store(h)
	}
	if err := m.t.check(name); err != nil {
		return Result{}, err
	}
	n := int(m.t.n)
	res := Result{Name: name, Deliveries: n, Elapsed: el, AllocsPerDelivery: float64(allocs-m.allocs0) / float64(max(n, 1)),
		PeakHeap: m.peak.Load(), Redelivered: m.t.dups.Load(), PerSecond: m.perSec,
		CPUPerDelivery: cpu / time.Duration(max(n, 1)), BrokerCPUPerDelivery: -1}
	if len(brokerPIDs) > 0 {
		res.BrokerCPUPerDelivery = bcpu / time.Duration(max(n, 1))
	}
	return res, nil
}

// summary is a contender's rounds: the median round, the min..max rates
// and the medians of the per-message CPU times over the rounds.
type summary struct {
	Median         Result
	Min, Max       float64
	Rounds         int
	CPU, BrokerCPU time.Duration
}

func summarize(rs []Result) summary {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b Result) int { return cmp.Compare(a.Rate(), b.Rate()) })
	var cpu, bcpu []time.Duration
	for _, r := range rs {
		cpu, bcpu = append(cpu, r.CPUPerDelivery), append(bcpu, r.BrokerCPUPerDelivery)
	}
	return summary{Median: rs[len(rs)/2], Min: rs[0].Rate(), Max: rs[len(rs)-1].Rate(), Rounds: len(rs),
		CPU: medianDur(cpu), BrokerCPU: medianDur(bcpu)}
}

// medianDur is the median of ds.
func medianDur(ds []time.Duration) time.Duration {
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[len(ds)/2]
}
