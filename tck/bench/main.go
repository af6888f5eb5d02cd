// Command bench runs, in one process and one run, the same messaging
// workload through an adapter and through its baselines, and prints one line
// per contender and the throughput ratios between them.
//
//	go run ./tck/bench -adapter mem [-n 20000] [-inflight 64] [-batch 0] [-payload 128]
//
// Each adapter registers a suite in its own file (mem.go, amqp.go, ...).
// Figures are only comparable within one run: the machines are shared.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"
)

// Config is the workload every contender of a suite runs.
type Config struct {
	N        int // messages
	InFlight int // in-flight limit / prefetch
	Batch    int // batch size; 0 = single delivery
	Payload  int // payload bytes (approximate, JSON)
	Rounds   int // runs per contender; the median is reported
	Timeout  time.Duration
}

// Result is one contender's measurement.
type Result struct {
	Name       string
	Deliveries int
	Elapsed    time.Duration
	// AllocsPerDelivery is heap allocations per delivery over the whole
	// run (publish + consume + settle), from runtime.MemStats.
	AllocsPerDelivery float64
	P50, P99          time.Duration // publish-to-settle latency
	Note              string
}

// Rate is deliveries per second.
func (r Result) Rate() float64 { return float64(r.Deliveries) / r.Elapsed.Seconds() }

// Ratio names a throughput ratio to print: RATIO <Label> <Num.Rate/Den.Rate>.
type Ratio struct{ Label, Num, Den string }

// Suite runs every contender of one adapter.
type Suite func(ctx context.Context, cfg Config) ([]Result, []Ratio, error)

var suites = map[string]Suite{}

func register(name string, s Suite) { suites[name] = s }

func main() {
	var cfg Config
	adapter := flag.String("adapter", "mem", "suite to run: "+strings.Join(names(), ", "))
	flag.IntVar(&cfg.N, "n", 20000, "messages per contender")
	flag.IntVar(&cfg.InFlight, "inflight", 64, "in-flight limit (prefetch)")
	flag.IntVar(&cfg.Batch, "batch", 0, "batch size (0: single delivery)")
	flag.IntVar(&cfg.Payload, "payload", 128, "payload size in bytes")
	flag.IntVar(&cfg.Rounds, "rounds", 3, "runs per contender, alternated; the median is reported")
	flag.DurationVar(&cfg.Timeout, "timeout", 5*time.Minute, "bound on the whole run")
	flag.Parse()

	s, ok := suites[*adapter]
	if !ok {
		fmt.Fprintf(os.Stderr, "bench: unknown adapter %q (have: %s)\n", *adapter, strings.Join(names(), ", "))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	fmt.Printf("bench adapter=%s n=%d inflight=%d batch=%d payload=%dB rounds=%d\n", *adapter, cfg.N, cfg.InFlight, cfg.Batch, cfg.Payload, cfg.Rounds)
	results, ratios, err := s(ctx, cfg)
	for _, r := range results {
		fmt.Printf("%-28s %10.0f deliveries/s  %6.2f allocs/delivery  p50=%-10v p99=%-10v %s\n",
			r.Name, r.Rate(), r.AllocsPerDelivery, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Note)
	}
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Name] = r
	}
	for _, q := range ratios {
		num, ok1 := byName[q.Num]
		den, ok2 := byName[q.Den]
		if !ok1 || !ok2 {
			continue
		}
		fmt.Printf("RATIO %s %.2f\n", q.Label, num.Rate()/den.Rate())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func names() []string {
	var n []string
	for k := range suites {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}
