package docs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlock matches a fenced Go code block.
var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// TestGoBlocksCompile extracts every ```go block of docs/*.md, writes
// each as a package of its own inside the module and type-checks them all
// with go vet. A block must be a complete file (starting with "package");
// illustrative fragments use another fence (```text).
func TestGoBlocksCompile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(".", "_doccheck-") // inside the module; "_" hides it from ./...
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	var pkgs []string
	where := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range goBlock.FindAllSubmatchIndex(b, -1) {
			src := string(b[m[2]:m[3]])
			line := 1 + strings.Count(string(b[:m[0]]), "\n")
			loc := fmt.Sprintf("%s:%d", f, line)
			if !strings.HasPrefix(strings.TrimSpace(src), "package ") && !strings.HasPrefix(strings.TrimSpace(src), "//") {
				t.Errorf("%s: a ```go block must be a complete file starting with package (use ```text for fragments)", loc)
				continue
			}
			pkg := filepath.Join(dir, fmt.Sprintf("%s_%d", strings.TrimSuffix(f, ".md"), i+1))
			if err := os.MkdirAll(pkg, 0o755); err != nil {
				t.Fatal(err)
			}
			name := "block.go"
			if strings.Contains(src, "\nfunc Test") || strings.Contains(src, "\nfunc Example") {
				name = "block_test.go"
			}
			if err := os.WriteFile(filepath.Join(pkg, name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			rel := "./" + filepath.ToSlash(pkg)
			pkgs = append(pkgs, rel)
			where[filepath.ToSlash(pkg)] = loc
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("no ```go blocks found: the check would prove nothing")
	}
	out, err := exec.Command("go", append([]string{"vet"}, pkgs...)...).CombinedOutput()
	if err != nil {
		msg := string(out)
		for pkg, loc := range where { // name the Markdown file and line of each failing block
			msg = strings.ReplaceAll(msg, pkg+"/", loc+" → ")
		}
		t.Fatalf("go vet of the docs' Go blocks failed:\n%s", msg)
	}
	t.Logf("%d Go blocks compiled", len(pkgs))
}
