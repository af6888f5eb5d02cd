package main

// Writing the published tables. With -markdown FILE the bench keeps what
// it prints and, when every suite passed, writes one table per suite into
// FILE between the suite's markers:
//
//	<!-- bench:begin kafka -->
//	<!-- bench:end kafka -->
//
// The tables are made from the printed lines themselves (parseRun), so a
// table says exactly what the run printed, and a saved output can be
// turned into tables later with -from. A printed result line that the
// parser does not recognise is an error, not a silent gap: the tests
// run a suite and parse what it prints, and check the published tables
// against the format written here (markdown_test.go).

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The lines the bench prints, as runSuite and provenance write them.
var (
	provenanceLine = regexp.MustCompile(`^bench (date|commit|machine|command): (.*)$`)
	suiteLine      = regexp.MustCompile(`^bench suite=(\S+) (n=\d+ inflight=\d+ k=\d+ batch=\d+ payload=\d+B rounds=\d+) \(each contender in its own process\)$`)
	resultLine     = regexp.MustCompile(`^(\S+)\s+(\d+) msg/s  \[(\d+)\.\.(\d+)\]\s+(\d+\.\d\d) allocs/msg  cpu=(\S+)\s+broker-cpu=(\S+)\s+peak-heap=(\S+)\s?(.*?)(?: \((\d+) redelivered\))?$`)
	latencyLine    = regexp.MustCompile(`^(\S+)\s+LATENCY p50=(\S+)\s+p99=(\S+)\s+\(medians of (\d+) rounds, paced at (\d+)/s, (\d+) messages\)\s*(.*)$`)
	ratioLine      = regexp.MustCompile(`^RATIO (\S+) (\d+\.\d\d)   \((\S+) \d+ / (\S+) \d+ msg/s\)$`)
	chartLine      = regexp.MustCompile(`^chart: (.+)$`)
	perSecondLine  = regexp.MustCompile(`^PERSECOND `)
	// looksLikeResult catches a result line whose format changed.
	looksLikeResult = regexp.MustCompile(`msg/s|LATENCY|^RATIO|^bench suite=`)
)

// runRecord is one bench run as printed: its provenance and its suites.
type runRecord struct {
	Info   map[string]string // date, commit, machine, command
	Suites []suiteRecord
}

type suiteRecord struct {
	Name, Params string
	About        []string // lines printed before the first result
	Rows         []resultRecord
	Latency      []latencyRecord
	Ratios       []ratioRecord
	Chart        string
}

type resultRecord struct {
	Name                   string
	Median, Min, Max       int
	Allocs, CPU, BrokerCPU string
	PeakHeap, Note         string
	Redelivered            int
}

type latencyRecord struct {
	Name, P50, P99, Note   string
	Rounds, Rate, Messages int
}

type ratioRecord struct {
	Label, Value, Num, Den string
}

// parseRun reads a bench run's printed output.
func parseRun(text string) (runRecord, error) {
	rec := runRecord{Info: map[string]string{}}
	var cur *suiteRecord
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		line = strings.TrimRight(line, " \t")
		if m := provenanceLine.FindStringSubmatch(line); m != nil {
			rec.Info[m[1]] = m[2]
			continue
		}
		if m := suiteLine.FindStringSubmatch(line); m != nil {
			rec.Suites = append(rec.Suites, suiteRecord{Name: m[1], Params: m[2]})
			cur = &rec.Suites[len(rec.Suites)-1]
			continue
		}
		if cur == nil || line == "" || perSecondLine.MatchString(line) {
			continue
		}
		if m := resultLine.FindStringSubmatch(line); m != nil {
			r := resultRecord{Name: m[1], Allocs: m[5], CPU: m[6], BrokerCPU: m[7], PeakHeap: m[8], Note: strings.TrimSpace(m[9])}
			r.Median, _ = strconv.Atoi(m[2])
			r.Min, _ = strconv.Atoi(m[3])
			r.Max, _ = strconv.Atoi(m[4])
			r.Redelivered, _ = strconv.Atoi(m[10])
			cur.Rows = append(cur.Rows, r)
			continue
		}
		if m := latencyLine.FindStringSubmatch(line); m != nil {
			l := latencyRecord{Name: m[1], P50: m[2], P99: m[3], Note: strings.TrimSpace(m[7])}
			l.Rounds, _ = strconv.Atoi(m[4])
			l.Rate, _ = strconv.Atoi(m[5])
			l.Messages, _ = strconv.Atoi(m[6])
			cur.Latency = append(cur.Latency, l)
			continue
		}
		if m := ratioLine.FindStringSubmatch(line); m != nil {
			cur.Ratios = append(cur.Ratios, ratioRecord{Label: m[1], Value: m[2], Num: m[3], Den: m[4]})
			continue
		}
		if m := chartLine.FindStringSubmatch(line); m != nil {
			cur.Chart = m[1]
			continue
		}
		if looksLikeResult.MatchString(line) {
			return rec, fmt.Errorf("line %d looks like a result but matches no format the tables are made from (did runSuite's output change? update markdown.go): %q", i+1, line)
		}
		if len(cur.Rows) == 0 && len(cur.Latency) == 0 && !strings.HasPrefix(line, "bench") {
			cur.About = append(cur.About, line)
		}
	}
	if len(rec.Suites) == 0 {
		return rec, fmt.Errorf("no %q line: not the output of tck/bench", "bench suite=")
	}
	return rec, nil
}

// The table's format. markdown_test.go checks the published tables
// against tableHeader and cellFormats, so a change here fails the test
// until the tables are regenerated.
const (
	tableHeader = "| contender | msg/s (median) | min..max | ratio (denominator) | allocs/msg | CPU/msg | broker CPU/msg | peak heap | what it runs |"
	tableRule   = "|---|--:|--:|---|--:|--:|--:|--:|---|"
)

var (
	numberCell  = `\d{1,3}(?:,\d{3})*`
	cellFormats = []*regexp.Regexp{
		regexp.MustCompile("^`[^`]+`$"),
		regexp.MustCompile(`^` + numberCell + `$`),
		regexp.MustCompile(`^` + numberCell + `\.\.` + numberCell + `$`),
		// "= 1.00 (best raw)", one or more "0.86 (denominator)" joined by
		// ", " (a contender divided by the best raw and by the bare raw),
		// the two (the best raw divided by another raw), or nothing.
		regexp.MustCompile(`^(?:= 1\.00 \(best raw\)(?:, \d+\.\d\d \([^()|]+\))*|\d+\.\d\d \([^()|]+\)(?:, \d+\.\d\d \([^()|]+\))*|)$`),
		regexp.MustCompile(`^\d+\.\d\d$`),
		regexp.MustCompile(`^(?:\d+\.\dµs|-)$`),
		regexp.MustCompile(`^(?:\d+\.\dµs|-)$`),
		regexp.MustCompile(`^\d+\.\dMiB$`),
		regexp.MustCompile(`^[^|]*$`),
	}
	measuredLine = regexp.MustCompile("^Measured (.+) on commit (\\S+), (.+): `(go run ./tck/bench [^`]+)`; (n=\\d+ inflight=\\d+ k=\\d+ batch=\\d+ payload=\\d+B rounds=\\d+)\\.$")
	latencyItem  = regexp.MustCompile("^- `([^`]+)`: p50 (\\S+), p99 (\\S+) \\(paced at (\\d+)/s, (\\d+) messages, medians of (\\d+) rounds\\)(?:: (.*))?$")
	chartItem    = regexp.MustCompile(`^!\[([^\]]+)\]\(([^)]+\.svg)\)$`)
)

// renderSuite writes a suite's block: what was measured where, the
// table, the latency contenders and the chart (chart: its path relative
// to the Markdown file, or "").
func renderSuite(info map[string]string, s suiteRecord, chart string) string {
	var b strings.Builder
	get := func(k string) string {
		if v := info[k]; v != "" {
			return v
		}
		return "unknown"
	}
	fmt.Fprintf(&b, "Measured %s on commit %s, %s: `%s`; %s.\n", get("date"), get("commit"), get("machine"), get("command"), s.Params)
	if len(s.About) > 0 {
		b.WriteString(strings.Join(s.About, "; ") + ".\n")
	}
	b.WriteString("\n" + tableHeader + "\n" + tableRule + "\n")
	// The best raw is the denominator of the "<suite>/best-raw" ratios
	// (the faster of several raw configurations, in this run); a suite
	// without such a ratio marks each denominator without a ratio of its own.
	best, dens := map[string]bool{}, map[string]bool{}
	for _, q := range s.Ratios {
		dens[q.Den] = true
		best[q.Den] = best[q.Den] || strings.HasSuffix(q.Label, "/best-raw")
	}
	anyBest := slices.Contains(slices.Collect(maps.Values(best)), true)
	for _, r := range s.Rows {
		var ratios []string
		for _, q := range s.Ratios {
			if q.Num == r.Name {
				ratios = append(ratios, fmt.Sprintf("%s (%s)", q.Value, q.Den))
			}
		}
		if best[r.Name] || (!anyBest && dens[r.Name] && len(ratios) == 0) {
			ratios = append([]string{"= 1.00 (best raw)"}, ratios...)
		}
		ratio := strings.Join(ratios, ", ")
		note := strings.ReplaceAll(r.Note, "|", "/")
		if r.Redelivered > 0 {
			note += fmt.Sprintf(" (%d redelivered)", r.Redelivered)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s..%s | %s | %s | %s | %s | %s | %s |\n",
			r.Name, thousands(r.Median), thousands(r.Min), thousands(r.Max), ratio, r.Allocs, r.CPU, r.BrokerCPU, r.PeakHeap, note)
	}
	if len(s.Latency) > 0 {
		b.WriteString("\nPublish → settlement accepted:\n\n")
		for _, l := range s.Latency {
			fmt.Fprintf(&b, "- `%s`: p50 %s, p99 %s (paced at %d/s, %d messages, medians of %d rounds)", l.Name, l.P50, l.P99, l.Rate, l.Messages, l.Rounds)
			if l.Note != "" {
				b.WriteString(": " + l.Note)
			}
			b.WriteString("\n")
		}
	}
	if chart != "" {
		fmt.Fprintf(&b, "\n![%s: median msg/s per contender, whiskers min..max](%s)\n", s.Name, chart)
	}
	return b.String()
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func beginMarker(suite string) string { return "<!-- bench:begin " + suite + " -->" }
func endMarker(suite string) string   { return "<!-- bench:end " + suite + " -->" }

// writeMarkdown replaces each suite's block in the Markdown file at path.
// Every suite of the run must have its markers in the file.
func writeMarkdown(path string, rec runRecord) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc := string(b)
	for _, s := range rec.Suites {
		begin, end := beginMarker(s.Name), endMarker(s.Name)
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			return fmt.Errorf("%s has no %s … %s pair: add both markers where the %s table goes", path, begin, end, s.Name)
		}
		block := "\n" + renderSuite(rec.Info, s, chartLink(path, s))
		doc = doc[:i+len(begin)] + block + doc[j:]
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// chartLink is the suite's chart as a link relative to the Markdown file:
// the chart this run wrote when it lies beside or below that file, else
// bench/<suite>.svg when that exists, else "".
func chartLink(mdPath string, s suiteRecord) string {
	dir, err := filepath.Abs(filepath.Dir(mdPath))
	if err != nil {
		return ""
	}
	if s.Chart != "" {
		if abs, err := filepath.Abs(s.Chart); err == nil {
			if rel, err := filepath.Rel(dir, abs); err == nil && !strings.HasPrefix(rel, "..") {
				if _, err := os.Stat(abs); err == nil {
					return filepath.ToSlash(rel)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bench", s.Name+".svg")); err == nil {
		return "bench/" + s.Name + ".svg"
	}
	return ""
}

// provenance is what the bench prints first: when, on what code and
// machine, by which command. The tables carry it.
func provenance(args []string) []string {
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
		if exec.Command("git", "diff", "--quiet", "HEAD").Run() != nil {
			commit += "-dirty"
		}
	}
	machine := fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	if m := cpuModel(); m != "" {
		machine += " (" + m + ")"
	}
	machine += ", " + runtime.Version()
	return []string{
		"bench date: " + time.Now().UTC().Format("2006-01-02 15:04 MST"),
		"bench commit: " + commit,
		"bench machine: " + machine,
		"bench command: " + strings.TrimSpace("go run ./tck/bench "+strings.Join(args, " ")),
	}
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// recording keeps a copy of what the bench prints when -markdown is set.
type recording struct {
	path string
	orig *os.File
	w    *os.File
	done chan struct{}
	buf  bytes.Buffer
}

// startRecording prints the run's provenance and, when path is set,
// copies everything printed from now on into the recording.
func startRecording(path string, args []string) *recording {
	r := &recording{path: path}
	if path != "" {
		pr, pw, err := os.Pipe()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -markdown:", err)
			os.Exit(2)
		}
		r.orig, r.w, r.done = os.Stdout, pw, make(chan struct{})
		os.Stdout = pw
		go func() {
			defer close(r.done)
			_, _ = io.Copy(io.MultiWriter(r.orig, &r.buf), pr)
		}()
	}
	for _, l := range provenance(args) {
		fmt.Println(l)
	}
	return r
}

// stop ends the recording; with write, it writes the tables.
func (r *recording) stop(write bool) error {
	if r.path == "" {
		return nil
	}
	r.w.Close()
	<-r.done
	os.Stdout = r.orig
	if !write {
		return nil
	}
	rec, err := parseRun(r.buf.String())
	if err != nil {
		return err
	}
	if err := writeMarkdown(r.path, rec); err != nil {
		return err
	}
	fmt.Println("tables:", r.path)
	return nil
}

// markdownFrom writes the tables of a saved bench output (-from).
func markdownFrom(from, path string) int {
	if path == "" {
		fmt.Fprintln(os.Stderr, "bench: -from needs -markdown FILE")
		return 2
	}
	b, err := os.ReadFile(from)
	if err == nil {
		var rec runRecord
		if rec, err = parseRun(string(b)); err == nil {
			err = writeMarkdown(path, rec)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}
