package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for the bench binary when a
// suite run in a test re-executes it as a contender (-child).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if i := slices.Index(os.Args, "-child"); i >= 0 && i+1 < len(os.Args) {
			os.Exit(runChild(os.Args[i+1]))
		}
	}
	os.Exit(m.Run())
}

// benchmarksPage is the page the published tables live in.
const benchmarksPage = "../../docs/benchmarks.md"

// TestTablesAreMadeFromWhatTheBenchPrints runs a small mem suite as the
// bench runs it (contenders in their own processes), parses what it
// printed and checks the table made from it: a change to runSuite's
// lines that the tables do not follow fails here.
func TestTablesAreMadeFromWhatTheBenchPrints(t *testing.T) {
	if testing.Short() {
		t.Skip("runs contender processes")
	}
	cfg := Config{N: 3000, InFlight: 100, K: 50, Batch: 50, Payload: 100, Rounds: 1,
		AckInterval: time.Millisecond, Rate: 2000, LatencyN: 300, Timeout: time.Minute}
	printed := capture(t, func() {
		for _, l := range provenance([]string{"-adapter", "mem"}) {
			fmt.Println(l)
		}
		if err := runSuite(context.Background(), suites["mem"], cfg, "channel,mem,mem-latency", ""); err != nil {
			t.Errorf("runSuite: %v", err)
		}
	})
	rec, err := parseRun(printed)
	if err != nil {
		t.Fatalf("%v\nprinted:\n%s", err, printed)
	}
	if len(rec.Suites) != 1 {
		t.Fatalf("parsed %d suites, want 1\nprinted:\n%s", len(rec.Suites), printed)
	}
	s := rec.Suites[0]
	var rows []string
	for _, r := range s.Rows {
		rows = append(rows, r.Name)
	}
	if !slices.Equal(rows, []string{"channel", "mem"}) || len(s.Latency) != 1 || s.Latency[0].Name != "mem-latency" {
		t.Fatalf("parsed rows %v and latency %+v, want channel and mem, and mem-latency\nprinted:\n%s", rows, s.Latency, printed)
	}
	if len(s.Ratios) == 0 || s.Ratios[0].Num != "mem" || s.Ratios[0].Den != "channel" {
		t.Fatalf("parsed ratios %+v, want mem/channel\nprinted:\n%s", s.Ratios, printed)
	}
	for _, k := range []string{"date", "commit", "machine", "command"} {
		if rec.Info[k] == "" {
			t.Errorf("provenance %q not parsed\nprinted:\n%s", k, printed)
		}
	}
	block := renderSuite(rec.Info, s, "")
	checkBlock(t, "rendered mem", block, "")
	if !strings.Contains(block, "= 1.00 (best raw)") {
		t.Errorf("the denominator is not marked:\n%s", block)
	}
}

// TestPublishedTablesHaveTheBenchFormat checks docs/benchmarks.md: every
// suite has its markers, the measured suites' blocks have exactly the
// format renderSuite writes, and every chart they link exists.
func TestPublishedTablesHaveTheBenchFormat(t *testing.T) {
	b, err := os.ReadFile(benchmarksPage)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	measured := 0
	for _, name := range names() {
		begin, end := beginMarker(name), endMarker(name)
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Errorf("%s has no %s … %s pair for the %s suite", benchmarksPage, begin, end, name)
			continue
		}
		block := strings.TrimSpace(doc[i+len(begin) : j])
		if block == "" {
			continue // not measured yet: the page says so outside the markers
		}
		measured++
		checkBlock(t, name, block, filepath.Dir(benchmarksPage))
	}
	if measured == 0 {
		t.Fatal("no measured suite on the page: the check would prove nothing")
	}
}

// TestParseRunRejectsAChangedResultLine: a result line in a format the
// tables do not know is an error, not a row silently left out.
func TestParseRunRejectsAChangedResultLine(t *testing.T) {
	out := "bench suite=mem n=1 inflight=1 k=1 batch=1 payload=1B rounds=1 (each contender in its own process)\n" +
		"mem    100 msg/s  [90..110]  1.00 allocs/msg  cpu=1.0µs  peak-heap=1.0MiB  no broker-cpu column\n"
	if _, err := parseRun(out); err == nil {
		t.Fatal("parseRun accepted a result line without broker-cpu")
	}
}

// checkBlock checks a suite's block line by line against the formats of
// markdown.go; dir, when set, is where its chart link must resolve.
func checkBlock(t *testing.T, name, block, dir string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if !measuredLine.MatchString(lines[0]) {
		t.Errorf("%s: first line does not say when, where and how it was measured in the bench's format:\n%s", name, lines[0])
	}
	h := slices.Index(lines, tableHeader)
	if h < 0 || h+1 >= len(lines) || lines[h+1] != tableRule {
		t.Fatalf("%s: no table with the header and rule renderSuite writes:\n%s\n%s\nin:\n%s", name, tableHeader, tableRule, block)
	}
	rows := 0
	for _, line := range lines[h+2:] {
		switch {
		case strings.HasPrefix(line, "|"):
			cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|"), "|")
			if len(cells) != len(cellFormats) {
				t.Errorf("%s: row has %d cells, want %d: %s", name, len(cells), len(cellFormats), line)
				continue
			}
			for k, c := range cells {
				if c = strings.TrimSpace(c); !cellFormats[k].MatchString(c) {
					t.Errorf("%s: cell %d %q does not match %s: %s", name, k+1, c, cellFormats[k], line)
				}
			}
			rows++
		case line == "", line == "Publish → settlement accepted:", latencyItem.MatchString(line):
		case chartItem.MatchString(line):
			if dir != "" {
				link := chartItem.FindStringSubmatch(line)[2]
				if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(link))); err != nil {
					t.Errorf("%s: chart %s: %v", name, link, err)
				}
			}
		default:
			t.Errorf("%s: a line renderSuite does not write: %q", name, line)
		}
	}
	if rows == 0 {
		t.Errorf("%s: the table has no rows", name)
	}
}

// capture returns what f prints to os.Stdout.
func capture(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = orig }()
	f()
	w.Close()
	os.Stdout = orig
	return <-done
}

// TestRowDividedTwiceHasTheTableFormat: a contender divided by the best
// raw and by the bare raw gets both ratios in its cell, in a format the
// published-tables check accepts.
func TestRowDividedTwiceHasTheTableFormat(t *testing.T) {
	out := "bench date: 2026-01-01 00:00 UTC\nbench commit: abc1234\nbench machine: linux/amd64, 2 CPUs, go1.26\nbench command: go run ./tck/bench -adapter amqp\n" +
		"bench suite=amqp n=10 inflight=1 k=1 batch=1 payload=1B rounds=1 (each contender in its own process)\n" +
		"raw-multiack      100 msg/s  [100..100]    1.00 allocs/msg  cpu=1.0µs   broker-cpu=-       peak-heap=1.0MiB   raw\n" +
		"raw-multiack-bare 125 msg/s  [125..125]    1.00 allocs/msg  cpu=1.0µs   broker-cpu=-       peak-heap=1.0MiB   raw, bare messages\n" +
		"amqp               90 msg/s  [90..90]      1.00 allocs/msg  cpu=1.0µs   broker-cpu=-       peak-heap=1.0MiB   sluice\n" +
		"RATIO amqp/best-raw 0.90   (amqp 90 / raw-multiack 100 msg/s)\n" +
		"RATIO raw-multiack-bare/best-raw 1.25   (raw-multiack-bare 125 / raw-multiack 100 msg/s)\n" +
		"RATIO amqp/bare-raw 0.72   (amqp 90 / raw-multiack-bare 125 msg/s)\n"
	rec, err := parseRun(out)
	if err != nil {
		t.Fatal(err)
	}
	block := renderSuite(rec.Info, rec.Suites[0], "")
	checkBlock(t, "amqp", block, "")
	if !strings.Contains(block, "| 0.90 (raw-multiack), 0.72 (raw-multiack-bare) |") {
		t.Errorf("the amqp row does not carry both ratios:\n%s", block)
	}
}

// TestBestRawIsTheBestRawRatiosDenominator: the row marked "= 1.00 (best
// raw)" is the denominator of the <suite>/best-raw ratios (here the
// faster of two raw contenders, itself divided by the other), not a raw
// contender only another raw is divided by.
func TestBestRawIsTheBestRawRatiosDenominator(t *testing.T) {
	s := suiteRecord{Name: "kafka", Params: "n=1 inflight=1 k=1 batch=1 payload=1B rounds=1",
		Rows: []resultRecord{
			{Name: "slow-raw", Median: 500, Min: 500, Max: 500, Allocs: "1.00", CPU: "1.0µs", BrokerCPU: "-", PeakHeap: "1.0MiB"},
			{Name: "fast-raw", Median: 600, Min: 600, Max: 600, Allocs: "1.00", CPU: "1.0µs", BrokerCPU: "-", PeakHeap: "1.0MiB"},
			{Name: "kafka", Median: 300, Min: 300, Max: 300, Allocs: "1.00", CPU: "1.0µs", BrokerCPU: "-", PeakHeap: "1.0MiB"},
		},
		Ratios: []ratioRecord{
			{Label: "kafka/best-raw", Value: "0.50", Num: "kafka", Den: "fast-raw"},
			{Label: "fast-raw/slow-raw", Value: "1.20", Num: "fast-raw", Den: "slow-raw"},
		}}
	info := map[string]string{"date": "2026-12-05 22:00 UTC", "commit": "abc1234", "machine": "linux/amd64, 2 CPUs (test), go1.26",
		"command": "go run ./tck/bench -adapter kafka"}
	block := renderSuite(info, s, "")
	for _, want := range []string{
		"| `slow-raw` | 500 | 500..500 |  |",
		"| `fast-raw` | 600 | 600..600 | = 1.00 (best raw), 1.20 (slow-raw) |",
		"| `kafka` | 300 | 300..300 | 0.50 (fast-raw) |",
	} {
		if !strings.Contains(block, want) {
			t.Errorf("rendered table lacks %q:\n%s", want, block)
		}
	}
	checkBlock(t, "rendered kafka", block, "")
}
