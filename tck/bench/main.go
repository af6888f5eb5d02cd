// Command bench measures, in one run, the same messaging workload through
// sluice and through the best configuration of the raw broker client for
// the same at-least-once guarantee, and prints one line per contender and
// the throughput ratios between them.
//
//	go run ./tck/bench -adapter kafka,amqp,mqtt,mem -svg docs/bench -markdown docs/benchmarks.md
//
// Every contender runs in its own process (the binary re-executes itself
// with -child), so garbage and heap from one contender never burden the
// next; contenders alternate over -rounds rounds (default 5) and each line
// shows the median round and the min..max over the rounds. Every run
// checks that exactly N distinct messages were settled and fails loudly
// otherwise. Consume suites pre-publish N messages before the timed
// section, which covers consume + settle only.
//
// # Adding a suite
//
// A suite is one file, tck/bench/<name>.go, with
//
//	func init() { register(Suite{Name: "redis", Setup: ..., Contenders: ..., Ratios: ...}) }
//
// Setup (optional) runs once in the parent process: it starts or finds the
// broker and returns an Env (strings) handed to every contender process.
// Each Contender's Run runs in a child process: it prepares its data
// (pre-publishing N messages tagged with seqHeader, see prepare helpers in
// common.go), calls startMeter, consumes and settles, marks each settled
// message on the tally, and returns Meter.finish. The generic sluice
// contenders (default pipeline, batch pipeline, latency) are in common.go:
// runPipeline and runLatency take any ports.Adapter. Ratios name the
// contenders whose medians divide: Den lists the raw baselines, the best of
// which is the denominator. Nothing else needs editing.
//
// Figures are only comparable within one run: the machines are shared.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"time"
)

// Config is the workload every contender of a suite runs.
type Config struct {
	N             int           // messages per contender run (0: the suite's default)
	InFlight      int           // in-flight limit / prefetch / Receive Maximum
	K             int           // raw AMQP: one multiple-ack every K deliveries
	Batch         int           // batch pipeline: operators.Batch size
	Payload       int           // payload bytes (approximate, JSON)
	Rounds        int           // alternated rounds; the median is reported
	AckInterval   time.Duration // raw MQTT: paho's SendAcksInterval
	Rate          int           // latency contenders: messages per second
	LatencyN      int           // latency contenders: messages per run
	Timeout       time.Duration // bound on one contender run
	ProfileDir    string        // when set, each contender run writes a CPU profile here
	TraceDir      string        // when set, each contender run writes an execution trace here
	MemProfileDir string        // when set, each contender run writes its allocation profile here
}

// Env is what a suite's Setup hands to its contender processes.
type Env map[string]string

// Result is one contender run's measurement.
type Result struct {
	Name       string
	Deliveries int
	Elapsed    time.Duration
	// AllocsPerDelivery is heap allocations per delivery in the timed
	// section, from runtime/metrics.
	AllocsPerDelivery float64
	// PeakHeap is the largest sampled size of live+unswept heap objects.
	PeakHeap    uint64
	Redelivered int64         // settled more than once (at-least-once)
	P50, P99    time.Duration // publish-to-settle latency (latency contenders)
	PerSecond   []int64       // distinct messages settled in each second
	// CPUPerDelivery is the contender process's CPU time (user+system)
	// in the timed section per delivery; BrokerCPUPerDelivery the
	// broker's (its process and descendants), -1 when the broker is not
	// a process of its own (mem, embedded in the contender). Both are
	// steadier than throughput on a loaded machine.
	CPUPerDelivery       time.Duration
	BrokerCPUPerDelivery time.Duration
	Note                 string
}

// Rate is deliveries per second.
func (r Result) Rate() float64 { return float64(r.Deliveries) / r.Elapsed.Seconds() }

// Contender is one way of running a suite's workload.
type Contender struct {
	Name string
	// Latency marks a contender that measures publish-to-settle latency
	// at a paced rate rather than throughput.
	Latency bool
	// Run runs in a child process, once per round.
	Run func(ctx context.Context, env Env, cfg Config) (Result, error)
}

// Ratio prints RATIO <Label> <median(Num) / max over Den of median(Den)>.
type Ratio struct {
	Label string
	Num   string
	Den   []string
}

// Suite is one adapter's benchmark.
type Suite struct {
	Name     string
	About    string // printed under the header: what is measured and where
	DefaultN int
	// Shared says Setup published the N messages every contender
	// consumes (from a fresh group), so warm-up runs consume all N too.
	Shared bool
	// PerSecond prints each contender's per-second series (median round)
	// and whether it stays flat: no second after the first below half
	// the median second.
	PerSecond  bool
	Setup      func(ctx context.Context, cfg Config) (Env, func(), error)
	Contenders []Contender
	Ratios     []Ratio
}

var suites = map[string]*Suite{}

// register adds a suite; each suite file calls it from init.
func register(s Suite) {
	if _, dup := suites[s.Name]; dup {
		panic("bench: suite " + s.Name + " registered twice")
	}
	suites[s.Name] = &s
}

func (s *Suite) contender(name string) (Contender, bool) {
	for _, c := range s.Contenders {
		if c.Name == name {
			return c, true
		}
	}
	return Contender{}, false
}

func main() {
	var cfg Config
	adapter := flag.String("adapter", "mem", "comma-separated suites to run, or all: "+strings.Join(names(), ", "))
	only := flag.String("only", "", "comma-separated contenders to run (default all)")
	flag.IntVar(&cfg.N, "n", 0, "messages per contender run (0: the suite's default)")
	flag.IntVar(&cfg.InFlight, "inflight", 100, "in-flight limit (prefetch, Receive Maximum)")
	flag.IntVar(&cfg.K, "k", 50, "raw AMQP baseline: one multiple-ack every k deliveries (at most -inflight)")
	flag.IntVar(&cfg.Batch, "batch", 50, "batch pipeline: operators.Batch size")
	flag.IntVar(&cfg.Payload, "payload", 100, "payload size in bytes (JSON)")
	flag.IntVar(&cfg.Rounds, "rounds", 5, "alternated rounds per contender (at least 1; 5 for published figures)")
	flag.DurationVar(&cfg.AckInterval, "ackinterval", time.Millisecond, "raw MQTT baseline: paho's SendAcksInterval")
	flag.IntVar(&cfg.Rate, "rate", 2000, "latency contenders: paced publish rate, messages/s")
	flag.IntVar(&cfg.LatencyN, "latency-n", 6000, "latency contenders: messages per run")
	flag.DurationVar(&cfg.Timeout, "timeout", 3*time.Minute, "bound on one contender run")
	flag.StringVar(&cfg.MemProfileDir, "memprofile", "", "write the allocation profile of every contender run to <dir>/<suite>-<contender>-<pid>.alloc.pprof (untimed preparation included; sampled every 4 KiB allocated, which slows the run)")
	flag.StringVar(&cfg.TraceDir, "trace", "", "write an execution trace of every contender run to <dir>/<suite>-<contender>-<pid>.trace (go tool trace)")
	flag.StringVar(&cfg.ProfileDir, "cpuprofile", "", "write a CPU profile of every contender run to <dir>/<suite>-<contender>-<pid>.pprof (and of an in-process broker, kfake or the embedded MQTT broker, during it to <dir>/<suite>-<contender>-broker-<round>.pprof)")
	svgDir := flag.String("svg", "", "write a chart per suite to <dir>/<suite>.svg")
	markdown := flag.String("markdown", "", "when every suite passed, write each suite's table into FILE between its <!-- bench:begin <suite> --> and <!-- bench:end <suite> --> markers (see markdown.go)")
	from := flag.String("from", "", "with -markdown: write the tables from this saved bench output instead of running")
	child := flag.String("child", "", "internal: run one contender (suite/contender) in this process")
	flag.Parse()
	// The bench's output is its report: the adapters' Info lines (each
	// contender process logs "adapter ready") would only bury it, and a
	// table's header lines are read back from it (-from).
	slog.SetLogLoggerLevel(slog.LevelWarn)
	if *child != "" {
		os.Exit(runChild(*child))
	}
	if *from != "" {
		os.Exit(markdownFrom(*from, *markdown))
	}
	cfg.K = max(1, min(cfg.K, cfg.InFlight))
	cfg.Rounds = max(cfg.Rounds, 1)

	var run []*Suite
	want := strings.Split(*adapter, ",")
	if *adapter == "all" {
		want = names()
	}
	for _, n := range want {
		s, ok := suites[strings.TrimSpace(n)]
		if !ok {
			fmt.Fprintf(os.Stderr, "bench: unknown suite %q (have: %s)\n", n, strings.Join(names(), ", "))
			os.Exit(2)
		}
		run = append(run, s)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rec := startRecording(*markdown, os.Args[1:])
	failed := false
	for _, s := range run {
		if err := runSuite(ctx, s, cfg, *only, *svgDir); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.Name, err)
			failed = true
		}
	}
	if err := rec.stop(!failed); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -markdown:", err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

func runSuite(ctx context.Context, s *Suite, cfg Config, only, svgDir string) error {
	if cfg.N == 0 {
		cfg.N = s.DefaultN
	}
	contenders := s.Contenders
	if only != "" {
		keep := strings.Split(only, ",")
		contenders = slices.DeleteFunc(slices.Clone(contenders), func(c Contender) bool { return !slices.Contains(keep, c.Name) })
	}
	fmt.Printf("bench suite=%s n=%d inflight=%d k=%d batch=%d payload=%dB rounds=%d (each contender in its own process)\n",
		s.Name, cfg.N, cfg.InFlight, cfg.K, cfg.Batch, cfg.Payload, cfg.Rounds)
	if s.About != "" {
		fmt.Println(s.About)
	}
	env := Env{}
	if s.Setup != nil {
		e, cleanup, err := s.Setup(ctx, cfg)
		if err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		defer cleanup()
		env = e
	}
	// One small warm-up round: brokers (RabbitMQ's JIT, kfake's maps)
	// reach steady state before anything is timed.
	warm := cfg
	warm.N, warm.LatencyN = min(cfg.N, 2000), min(cfg.LatencyN, 500)
	if s.Shared {
		warm.N = cfg.N
	}
	for _, c := range contenders {
		if _, err := spawn(ctx, s.Name, c.Name, warm, env); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	all := map[string][]Result{}
	for r := range cfg.Rounds {
		for i := range contenders { // rotate the order so no contender always runs first
			c := contenders[(i+r)%len(contenders)]
			stopProfile, err := profileBroker(cfg, env, s.Name, c.Name, r)
			if err != nil {
				return err
			}
			res, err := spawn(ctx, s.Name, c.Name, cfg, env)
			stopProfile()
			if err != nil {
				return err
			}
			all[c.Name] = append(all[c.Name], res)
		}
	}
	sums := map[string]summary{}
	var chart []bar
	for _, c := range contenders {
		sm := summarize(all[c.Name])
		sums[c.Name] = sm
		r := sm.Median
		if c.Latency {
			var p50s, p99s []time.Duration
			for _, x := range all[c.Name] {
				p50s = append(p50s, x.P50)
				p99s = append(p99s, x.P99)
			}
			fmt.Printf("%-26s LATENCY p50=%-9v p99=%-9v (medians of %d rounds, paced at %d/s, %d messages)  %s\n",
				c.Name, medianDur(p50s).Round(time.Microsecond), medianDur(p99s).Round(time.Microsecond), sm.Rounds, cfg.Rate, cfg.LatencyN, r.Note)
			continue
		}
		fmt.Printf("%-26s %9.0f msg/s  [%.0f..%.0f]  %6.2f allocs/msg  cpu=%-7s broker-cpu=%-7s peak-heap=%-8s %s%s\n",
			c.Name, r.Rate(), sm.Min, sm.Max, r.AllocsPerDelivery, micros(sm.CPU), micros(sm.BrokerCPU), mib(r.PeakHeap), r.Note, redelivered(r))
		chart = append(chart, bar{Name: c.Name, Median: r.Rate(), Min: sm.Min, Max: sm.Max, Note: r.Note})
	}
	var ratioLines []string
	for _, q := range s.Ratios {
		num, ok := sums[q.Num]
		if !ok {
			continue
		}
		best, bestName := 0.0, ""
		for _, d := range q.Den {
			if sm, ok := sums[d]; ok && sm.Median.Rate() > best {
				best, bestName = sm.Median.Rate(), d
			}
		}
		if bestName == "" {
			continue
		}
		line := fmt.Sprintf("RATIO %s %.2f", q.Label, num.Median.Rate()/best)
		fmt.Printf("%s   (%s %.0f / %s %.0f msg/s)\n", line, q.Num, num.Median.Rate(), bestName, best)
		ratioLines = append(ratioLines, line)
	}
	for _, c := range contenders {
		if c.Latency {
			continue
		}
		if ps := sums[c.Name].Median.PerSecond; s.PerSecond && len(ps) >= 3 {
			fmt.Println(flatness(c.Name, ps))
		}
	}
	if svgDir != "" {
		path, err := writeChart(svgDir, s.Name, cfg, chart, ratioLines)
		if err != nil {
			return err
		}
		fmt.Println("chart:", path)
	}
	return nil
}

// flatness reports a median round's per-second throughput: the target is
// that no second after the first falls below half the median second.
func flatness(name string, ps []int64) string {
	rest := slices.Clone(ps[1:])
	slices.Sort(rest)
	med := rest[len(rest)/2]
	verdict := "flat"
	if rest[0]*2 < med {
		verdict = "NOT FLAT (a second below half the median)"
	}
	return fmt.Sprintf("PERSECOND %s %v  min-after-first=%d median=%d: %s", name, ps, rest[0], med, verdict)
}

// micros prints a per-message CPU time in µs ("-" when not measured).
func micros(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}

func mib(b uint64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

func redelivered(r Result) string {
	if r.Redelivered == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d redelivered)", r.Redelivered)
}

func names() []string {
	var n []string
	for k := range suites {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}
