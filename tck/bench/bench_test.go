package main

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/ports"
)

func TestTallyCountsDistinctAndRejectsForeign(t *testing.T) {
	tl := newTally(3)
	tl.mark(0)
	tl.mark(0) // redelivered
	tl.mark(1)
	if err := tl.check("x"); err == nil {
		t.Fatal("check passed with 2 of 3 settled")
	}
	tl.mark(2)
	select {
	case <-tl.done:
	default:
		t.Fatal("done not closed after all 3 settled")
	}
	if err := tl.check("x"); err != nil {
		t.Fatal(err)
	}
	if got := tl.dups.Load(); got != 1 {
		t.Fatalf("redelivered = %d, want 1", got)
	}
	tl.mark(3)
	tl.markHeaders(ports.NewHeaders(seqHeader, "nope"))
	if err := tl.check("x"); err == nil || !strings.Contains(err.Error(), "2 foreign") {
		t.Fatalf("check = %v, want a failure naming 2 foreign messages", err)
	}
}

func TestTallyWaitFailsWithCounts(t *testing.T) {
	tl := newTally(2)
	tl.mark(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	err := tl.wait(ctx, "c")
	if err == nil || !strings.Contains(err.Error(), "only 1 of 2") {
		t.Fatalf("wait = %v, want a failure saying 1 of 2", err)
	}
}

func TestSummarizeMedianMinMax(t *testing.T) {
	var rs []Result
	for _, n := range []int{5, 1, 3, 4, 2} {
		rs = append(rs, Result{Deliveries: n, Elapsed: time.Second})
	}
	s := summarize(rs)
	if s.Median.Deliveries != 3 || s.Min != 1 || s.Max != 5 || s.Rounds != 5 {
		t.Fatalf("summary = %+v, want median 3, min 1, max 5 of 5", s)
	}
}

func TestChartIsWellFormedSVG(t *testing.T) {
	dir := t.TempDir()
	path, err := writeChart(dir, "x", Config{N: 10, Rounds: 5}, []bar{
		{Name: "raw <best>", Median: 43612, Min: 30000, Max: 50000},
		{Name: "sluice & co", Median: 20000, Min: 19000, Max: 21000},
	}, []string{"RATIO x/best-raw 0.46"})
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, "x.svg") {
		t.Fatalf("path = %s", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		if _, err := d.Token(); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("not well-formed XML: %v\n%s", err, b)
		}
	}
	for _, want := range []string{"raw &lt;best&gt;", "sluice &amp; co", "43.6k/s", "RATIO x/best-raw 0.46"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

func TestEverySuiteIsWellFormed(t *testing.T) {
	for name, s := range suites {
		seen := map[string]bool{}
		for _, c := range s.Contenders {
			if seen[c.Name] {
				t.Errorf("%s: contender %s twice", name, c.Name)
			}
			seen[c.Name] = true
		}
		for _, r := range s.Ratios {
			if !seen[r.Num] {
				t.Errorf("%s: ratio %s names unknown contender %s", name, r.Label, r.Num)
			}
			for _, d := range r.Den {
				if !seen[d] {
					t.Errorf("%s: ratio %s names unknown contender %s", name, r.Label, d)
				}
			}
		}
	}
}

// procCPU reads a process's CPU time to well under a clock tick (10 ms):
// a few milliseconds of spinning show, as they did not when it read
// /proc/<pid>/stat.
func TestProcCPUResolvesMilliseconds(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc: broker CPU is not measured on this system")
	}
	pid := os.Getpid()
	before, cpu0 := procCPU(pid), processCPU()
	deadline := time.Now().Add(10 * time.Second)
	for processCPU()-cpu0 < 3*time.Millisecond { // 3 ms of this process's CPU, however loaded the machine
		if time.Now().After(deadline) {
			t.Fatal("this process got under 3 ms of CPU in 10 s")
		}
	}
	spent := procCPU(pid) - before
	if spent < time.Millisecond || spent > 5*time.Second {
		t.Fatalf("procCPU advanced %v over a spin of at least 3 ms of CPU; want about that (at ms resolution)", spent)
	}
}
