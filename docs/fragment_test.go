package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// markdownFiles returns the Markdown files whose Go blocks are checked:
// every .md under docs/ and the repository's README.md.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var mds []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), "_") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			mds = append(mds, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mds = append(mds, "../README.md")
	sort.Strings(mds)
	return mds
}

// A fragment is a ```go block that is not a complete file, marked on the
// line before its fence with
//
//	<!-- fragment: body -->   statements: compiled as the body of
//	                          func(ctx context.Context) error { …; return nil }
//	<!-- fragment: decls -->  declarations: compiled at package level
//
// in a package of its own, with the imports its package qualifiers name
// (see fragmentImports). Every variable it declares must be used, as in
// any Go code. A fragment that needs a value from outside names it in a
// "var" line of its own.
var fragmentMarker = regexp.MustCompile(`<!-- fragment: (body|decls) -->\s*$`)

func fragmentKind(before []byte) (string, bool) {
	m := fragmentMarker.FindSubmatch(before)
	if m == nil {
		return "", false
	}
	return string(m[1]), true
}

// fragmentImports maps the package qualifiers a fragment may use to their
// import paths.
var fragmentImports = map[string]string{
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"log":          "log",
	"slog":         "log/slog",
	"os":           "os",
	"time":         "time",
	"adapters":     "github.com/sluicemq/sluice/adapters",
	"amqp":         "github.com/sluicemq/sluice/adapters/amqp",
	"kafka":        "github.com/sluicemq/sluice/adapters/kafka",
	"mem":          "github.com/sluicemq/sluice/adapters/mem",
	"mqtt":         "github.com/sluicemq/sluice/adapters/mqtt",
	"pulsar":       "github.com/sluicemq/sluice/adapters/pulsar",
	"activemq":     "github.com/sluicemq/sluice/adapters/activemq",
	"redis":        "github.com/sluicemq/sluice/adapters/redis",
	"rocketmq":     "github.com/sluicemq/sluice/adapters/rocketmq",
	"flow":         "github.com/sluicemq/sluice/flow",
	"ports":        "github.com/sluicemq/sluice/ports",
	"operators":    "github.com/sluicemq/sluice/operators",
	"deadletter":   "github.com/sluicemq/sluice/operators/deadletter",
	"pulsarclient": "github.com/apache/pulsar-client-go/pulsar",
	"wmbridge":     "github.com/sluicemq/sluice/adapters/watermill",
	"message":      "github.com/ThreeDotsLabs/watermill/message",
}

var qualifier = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Za-z_]`)

// wrapFragment returns the complete file a fragment compiles as.
func wrapFragment(kind, src string) (string, error) {
	code := stripStringsAndComments(src)
	var imports []string
	for _, m := range qualifier.FindAllStringSubmatch(code, -1) {
		path, ok := fragmentImports[m[1]]
		if !ok {
			continue // a method or field selector on a local value
		}
		if !slices.Contains(imports, path) {
			imports = append(imports, path)
		}
	}
	if kind == "body" && !slices.Contains(imports, "context") {
		imports = append(imports, "context")
	}
	sort.Strings(imports)
	var b strings.Builder
	b.WriteString("package fragment\n\nimport (\n")
	for _, p := range imports {
		name := importName(p)
		fmt.Fprintf(&b, "\t%s %q\n", name, p)
	}
	b.WriteString(")\n\n")
	for _, p := range imports { // keep every import used
		name := importName(p)
		fmt.Fprintf(&b, "var _ = %s.%s\n", name, anyExported[p])
	}
	switch kind {
	case "body":
		b.WriteString("\nfunc fragment(ctx context.Context) error {\n")
		b.WriteString(src)
		b.WriteString("\treturn nil\n}\n")
	case "decls":
		b.WriteString("\n" + src)
	default:
		return "", fmt.Errorf("unknown fragment kind %q", kind)
	}
	return b.String(), nil
}

// importName is the name a fragment's import of path p is bound to: its
// qualifier in fragmentImports (pulsarclient, wmbridge differ from the
// path's last element).
func importName(p string) string {
	for q, path := range fragmentImports {
		if path == p {
			return q
		}
	}
	return p[strings.LastIndex(p, "/")+1:]
}

// anyExported names one exported identifier of each importable package,
// to keep an import used.
var anyExported = map[string]string{
	"context":  "Background",
	"errors":   "New",
	"fmt":      "Sprint",
	"log":      "Print",
	"log/slog": "Default",
	"github.com/sluicemq/sluice/adapters/watermill":   "NewPublisher",
	"github.com/ThreeDotsLabs/watermill/message":      "NewMessage",
	"github.com/sluicemq/sluice/operators/deadletter": "New",
	"os":                                  "Getenv",
	"time":                                "Now",
	"github.com/sluicemq/sluice/adapters": "Open",
	"github.com/sluicemq/sluice/adapters/amqp":     "New",
	"github.com/sluicemq/sluice/adapters/kafka":    "New",
	"github.com/sluicemq/sluice/adapters/mem":      "Open",
	"github.com/sluicemq/sluice/adapters/mqtt":     "New",
	"github.com/sluicemq/sluice/adapters/pulsar":   "New",
	"github.com/sluicemq/sluice/adapters/activemq": "New",
	"github.com/sluicemq/sluice/adapters/redis":    "New",
	"github.com/sluicemq/sluice/adapters/rocketmq": "New",
	"github.com/sluicemq/sluice/flow":              "New",
	"github.com/sluicemq/sluice/ports":             "NewID",
	"github.com/sluicemq/sluice/operators":         "Batch[int]",
	"github.com/apache/pulsar-client-go/pulsar":    "NewClient",
}

var stringOrComment = regexp.MustCompile("(?s)//[^\n]*|\"(?:[^\"\\\\\n]|\\\\.)*\"|`[^`]*`")

func stripStringsAndComments(src string) string { return stringOrComment.ReplaceAllString(src, "") }

// A package main block may claim what it does when run, on the line after
// its closing fence:
//
//	<!-- output -->            then a ```text block: its exact stdout
//	<!-- prints: TEXT -->      it prints a line containing TEXT, then
//	                           runs until interrupted: the check sends it
//	                           os.Interrupt and wants a clean exit
//
// The check builds and runs it and compares.
var (
	outputClaim = regexp.MustCompile("(?s)^\\s*<!-- output -->\\s*\n```text\n(.*?)```")
	printsClaim = regexp.MustCompile(`^\s*<!-- prints: (.*?) -->`)
)

type claim struct {
	output string // exact stdout, or
	prints string // a line containing this, then interrupt
}

type run struct {
	dir, loc string
	claim    claim
}

func runClaim(after []byte) (claim, bool) {
	if m := outputClaim.FindSubmatch(after); m != nil {
		return claim{output: string(m[1])}, true
	}
	if m := printsClaim.FindSubmatch(after); m != nil {
		return claim{prints: string(m[1])}, true
	}
	return claim{}, false
}

func (r run) check(t *testing.T) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "prog")
	if out, err := exec.Command("go", "build", "-o", bin, "./"+filepath.ToSlash(r.dir)).CombinedOutput(); err != nil {
		t.Errorf("%s: build: %v\n%s", r.loc, err, out)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r.claim.prints == "" {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, bin)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("%s: run: %v\n%s", r.loc, err, stderr.String())
			return
		}
		if got := stdout.String(); strings.TrimSpace(got) != strings.TrimSpace(r.claim.output) {
			t.Errorf("%s: the program printed\n%s\nbut the document says\n%s", r.loc, got, r.claim.output)
		}
		return
	}
	cmd := exec.CommandContext(ctx, bin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Errorf("%s: start: %v", r.loc, err)
		return
	}
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), r.claim.prints) {
				ok = true
				found <- true
			}
		}
		if !ok {
			found <- false
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			_ = cmd.Wait()
			t.Errorf("%s: the program ended without printing %q\n%s", r.loc, r.claim.prints, stderr.String())
			return
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Errorf("%s: the program did not print %q within a minute\n%s", r.loc, r.claim.prints, stderr.String())
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s: after os.Interrupt the program exited with %v\n%s", r.loc, err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Errorf("%s: the program did not exit within 30s of os.Interrupt", r.loc)
	}
}
