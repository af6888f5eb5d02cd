// Command testreport reads `go test -json` on stdin and prints what the
// non-verbose go test prints — a line per package, and the output of every
// failed test — followed by every skipped test with its reason, so that a
// skip is never mistaken for a pass. It exits 1 when a test or package
// failed, or when the stream held no test result at all.
//
//	go test -json ./... | go run ./tck/testreport
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json's output.
type event struct {
	Time   time.Time
	Action string
	// ImportPath names the package of build-output and build-fail.
	ImportPath string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
}

type key struct{ pkg, test string }

// report accumulates the stream.
type report struct {
	w       io.Writer
	out     map[key][]string // output of running tests and packages
	skipped []skip
	counts  map[string]int // pass, fail, skip of tests
	failed  bool
	seen    bool
}

type skip struct {
	key
	reason string
}

func newReport(w io.Writer) *report {
	return &report{w: w, out: map[key][]string{}, counts: map[string]int{}}
}

func (r *report) add(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.w, e.Output)
	case "build-fail":
		r.failed = true
	case "output":
		r.out[k] = append(r.out[k], e.Output)
		if e.Test == "" && !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "--- ") &&
			!strings.HasPrefix(e.Output, "PASS") && !strings.HasPrefix(e.Output, "FAIL") && !strings.HasPrefix(e.Output, "ok ") {
			fmt.Fprint(r.w, e.Output) // a package's own output (build errors, TestMain) as it comes
		}
	case "pass", "fail", "skip":
		lines := r.out[k]
		delete(r.out, k)
		if e.Test == "" {
			r.seen = true
			r.pkgDone(e, lines)
			return
		}
		r.seen = true
		r.counts[e.Action]++
		switch e.Action {
		case "fail":
			r.failed = true
			for _, l := range lines {
				fmt.Fprint(r.w, l)
			}
		case "skip":
			r.skipped = append(r.skipped, skip{k, reason(lines)})
		}
	}
}

func (r *report) pkgDone(e event, _ []string) {
	if e.Action == "fail" {
		// tests that never finished (a timeout, a panic in another
		// goroutine): their output is the failure
		var open []key
		for k := range r.out {
			if k.pkg == e.Package {
				open = append(open, k)
			}
		}
		sort.Slice(open, func(i, j int) bool { return open[i].test < open[j].test })
		for _, k := range open {
			for _, l := range r.out[k] {
				fmt.Fprint(r.w, l)
			}
			delete(r.out, k)
		}
	}
	switch e.Action {
	case "pass":
		fmt.Fprintf(r.w, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
	case "skip":
		fmt.Fprintf(r.w, "?   \t%s\t[no test files]\n", e.Package)
	case "fail":
		r.failed = true
		fmt.Fprintf(r.w, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
	}
}

// reason is the last line a skipped test printed before its "--- SKIP".
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		return l
	}
	return "(no reason printed)"
}

func (r *report) summary() {
	sort.Slice(r.skipped, func(i, j int) bool {
		a, b := r.skipped[i], r.skipped[j]
		return a.pkg < b.pkg || a.pkg == b.pkg && a.test < b.test
	})
	if len(r.skipped) > 0 {
		fmt.Fprintf(r.w, "\nSKIPPED (%d):\n", len(r.skipped))
		for _, s := range r.skipped {
			fmt.Fprintf(r.w, "  %s %s: %s\n", strings.TrimPrefix(s.pkg, "github.com/sluicemq/sluice/"), s.test, s.reason)
		}
	}
	fmt.Fprintf(r.w, "\ntests: %d passed, %d failed, %d skipped\n", r.counts["pass"], r.counts["fail"], r.counts["skip"])
}

func main() {
	r := newReport(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // not test2json: go vet or the go command's own words
			continue
		}
		r.add(e)
	}
	r.summary()
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
	if r.failed || !r.seen {
		os.Exit(1)
	}
}
