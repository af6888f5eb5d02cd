package docs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// goBlock matches a fenced Go code block and the line after it;
// pkgClause a package clause; exampleRef the names in a reference such as
// "(`ExampleBatch`, `schedule.ExampleScheduler`)".
var (
	goBlock    = regexp.MustCompile("(?ms)^```go\n(.*?)^```[ \t]*\n([^\n]*)")
	pkgClause  = regexp.MustCompile(`(?m)^package (\w+)`)
	exampleRef = regexp.MustCompile("`((?:\\w+\\.)?Example\\w*)`")
)

// TestGoBlocksCompile extracts every complete-file ```go block of
// README.md and docs/**/*.md into packages inside the module and
// type-checks them with go vet, then runs the tests among them, and runs
// the programs that claim what they print (see runClaim). A block marked
// as a fragment compiles inside its stated wrapper (see fragmentMarker). Blocks of one Markdown file with
// the same package name (a "_test" suffix ignored) form one package, so a
// guide can show code and its test; every package main block stands
// alone. A block that is not a complete file is an excerpt: it must be
// followed by a reference to the Example functions it is cut from (which
// go test compiles and runs), or else be cut from the module's source, and
// every line of it must be found there (see checkExcerpt).
func TestGoBlocksCompile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	mds := markdownFiles(t)
	root, err := os.MkdirTemp(".", "_doccheck-") // inside the module; "_" hides it from ./...
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })

	var runs []run
	where := map[string]string{} // file written → Markdown file:line
	dirs := map[string]bool{}    // package dir → has tests
	blocks := 0
	for _, md := range mds {
		b, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range goBlock.FindAllSubmatchIndex(b, -1) {
			src := string(b[m[2]:m[3]])
			loc := fmt.Sprintf("%s:%d", md, 1+strings.Count(string(b[:m[0]]), "\n"))
			pm := pkgClause.FindStringSubmatch(src)
			if kind, ok := fragmentKind(b[:m[0]]); ok && pm == nil {
				wrapped, err := wrapFragment(kind, src)
				if err != nil {
					t.Errorf("%s: %v", loc, err)
					continue
				}
				src, pm = wrapped, []string{"", "fragment"}
			}
			if pm == nil {
				var refs []string
				for _, r := range exampleRef.FindAllStringSubmatch(string(b[m[4]:m[5]]), -1) {
					refs = append(refs, r[1])
				}
				checkExcerpt(t, loc, src, refs)
				continue
			}
			pkg := strings.TrimSuffix(pm[1], "_test")
			if pkg == "main" { // every program stands alone
				pkg = fmt.Sprintf("main%d", i+1)
			}
			if pkg == "fragment" { // every fragment compiles alone
				pkg = fmt.Sprintf("fragment%d", i+1)
			}
			dir := filepath.Join(root, strings.NewReplacer("/", "_", ".", "_").Replace(strings.TrimSuffix(md, ".md"))+"_"+pkg)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("block%d.go", i+1)
			isTest := strings.Contains(src, "\nfunc Test") || strings.Contains(src, "\nfunc Example")
			if isTest {
				name = fmt.Sprintf("block%d_test.go", i+1)
			}
			file := filepath.Join(dir, name)
			if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			where[filepath.ToSlash(file)] = loc
			dirs[dir] = dirs[dir] || isTest
			blocks++
			if claim, ok := runClaim(b[m[4]:]); ok {
				if pm[1] != "main" {
					t.Errorf("%s: only a package main block can claim what it prints", loc)
				} else {
					runs = append(runs, run{dir: dir, loc: loc, claim: claim})
				}
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no ```go blocks found: the check would prove nothing")
	}
	var all, tested []string
	for d, hasTests := range dirs {
		all = append(all, "./"+filepath.ToSlash(d))
		if hasTests {
			tested = append(tested, "./"+filepath.ToSlash(d))
		}
	}
	sort.Strings(all)
	sort.Strings(tested)
	explain := func(out []byte) string {
		msg := string(out)
		for file, loc := range where { // name the Markdown file and line of each block
			msg = strings.ReplaceAll(msg, file, loc+" ("+filepath.Base(file)+")")
			msg = strings.ReplaceAll(msg, filepath.Base(filepath.Dir(file))+"/"+filepath.Base(file), loc+" ("+filepath.Base(file)+")")
		}
		return msg
	}
	if out, err := exec.Command("go", append([]string{"vet"}, all...)...).CombinedOutput(); err != nil {
		t.Fatalf("go vet of the docs' Go blocks failed:\n%s", explain(out))
	}
	if len(tested) > 0 {
		if out, err := exec.Command("go", append([]string{"test", "-count=1"}, tested...)...).CombinedOutput(); err != nil {
			t.Fatalf("the docs' tests failed:\n%s", explain(out))
		}
	}
	for _, r := range runs {
		r.check(t)
	}
	t.Logf("%d Go blocks in %d packages compiled; tests run in %d; %d programs run", blocks, len(all), len(tested), len(runs))
}
