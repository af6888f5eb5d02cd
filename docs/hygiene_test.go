package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the module root, one directory above this package.
const repoRoot = ".."

// workItem matches a reference to a work item, a working session or a
// numbered finding (one of those words followed by its number): history
// belongs in the changelog and the tracker, and a fixed incident is a
// regression test named for the behaviour it protects. URLs are removed
// first, so a third-party tracker is cited by its address.
var (
	workItem = regexp.MustCompile(`(?i)\b(session|issue|finding)s? [0-9]`)
	anyURL   = regexp.MustCompile(`https?://[^\s)>\]"'` + "`" + `]+`)
)

// repoFiles returns the module's files (slash paths relative to the root)
// whose names end in one of exts, leaving out hidden directories, the
// docs test's scratch packages and testdata.
func repoFiles(t *testing.T, exts ...string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != repoRoot && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		for _, ext := range exts {
			if strings.HasSuffix(name, ext) {
				rel, _ := filepath.Rel(repoRoot, path)
				files = append(files, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// TestNoWorkItemNumbers fails when a Markdown or Go file of the module
// cites a work item, session or finding by number. Describe the
// behaviour instead, name the test that protects it, and cite a
// third-party tracker by its URL.
func TestNoWorkItemNumbers(t *testing.T) {
	files := repoFiles(t, ".md", ".go")
	if len(files) < 50 {
		t.Fatalf("found only %d .md and .go files under %s: the scan would prove nothing", len(files), repoRoot)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := workItem.FindString(anyURL.ReplaceAllString(line, "")); m != "" {
				t.Errorf("%s:%d cites %q: describe the behaviour (and name its test) instead; cite third-party trackers by URL\n\t%s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

// citedTest matches a test named in backquotes in the docs: a Test,
// Example, Benchmark or Fuzz function, optionally followed by a subtest
// path ("TestReliability/dlq-fail", "TestTCK/RequestReply").
var (
	citedTest = regexp.MustCompile("`((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)((?:/[^`/\\s]+)*)`")
	testFunc  = regexp.MustCompile(`(?m)^func (?:\([^)]*\) )?((?:Test|Example|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	goString  = regexp.MustCompile(`"([^"\\\n]*)"`)
)

// TestCitedTestsExist checks that every test the documentation names in
// backquotes exists: the function is declared in a _test.go file of the
// module, and each element of a subtest path is a string some Go file
// of the module spells out (a TCK case or fault scenario registered by
// name, a target name, a t.Run name; "_" in a subtest path stands for a
// space, as go test prints it; "<scenario>" is a placeholder).
func TestCitedTestsExist(t *testing.T) {
	funcs := map[string]bool{}
	strs := map[string]bool{}
	for _, f := range repoFiles(t, ".go") {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, "_test.go") {
			for _, m := range testFunc.FindAllSubmatch(b, -1) {
				funcs[string(m[1])] = true
			}
		}
		for _, m := range goString.FindAllSubmatch(b, -1) {
			strs[string(m[1])] = true
		}
	}
	cited := 0
	for _, md := range repoFiles(t, ".md") {
		b, err := os.ReadFile(filepath.Join(repoRoot, md))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range citedTest.FindAllStringSubmatchIndex(string(b), -1) {
			cited++
			line := 1 + strings.Count(string(b[:m[0]]), "\n")
			name, path := string(b[m[2]:m[3]]), string(b[m[4]:m[5]])
			if !funcs[name] {
				t.Errorf("%s:%d names %s, which no _test.go file of the module declares", md, line, name)
				continue
			}
			for _, seg := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
				if seg == "" || strings.HasPrefix(seg, "<") && strings.HasSuffix(seg, ">") {
					continue // a placeholder: TestReliability/<scenario>
				}
				if !strs[seg] && !strs[strings.ReplaceAll(seg, "_", " ")] {
					t.Errorf("%s:%d names subtest %s%s: no Go file of the module spells %q", md, line, name, path, seg)
				}
			}
		}
	}
	if cited == 0 {
		t.Fatal("no test is cited in any Markdown file: the check would prove nothing")
	}
	t.Logf("%d citations of tests checked", cited)
}
