package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// source is the module's Go code, loaded once: every file's normalised
// lines, and the normalised lines of every Example function by name
// ("ExampleBatch" and "operators.ExampleBatch").
var source = sync.OnceValues(func() (files map[string][]string, examples map[string][]string) {
	files, examples = map[string][]string{}, map[string][]string{}
	_ = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() && path != ".." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(name, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		files[path] = codeLines(string(b))
		if !strings.HasSuffix(name, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, b, parser.ParseComments)
		if err != nil {
			return nil
		}
		pkg := strings.TrimSuffix(f.Name.Name, "_test")
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Example") {
				continue
			}
			start, end := fset.Position(fn.Pos()).Offset, fset.Position(fn.End()).Offset
			lines := normalise(string(b[start:end]))
			examples[fn.Name.Name] = append(examples[fn.Name.Name], lines...)
			examples[pkg+"."+fn.Name.Name] = append(examples[pkg+"."+fn.Name.Name], lines...)
		}
		return nil
	})
	return files, examples
})

// normalise returns the non-empty lines of src with runs of white space
// collapsed, so alignment does not matter.
func normalise(src string) []string {
	var out []string
	for _, l := range strings.Split(src, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// codeLines returns the normalised lines of src without comment lines and
// trailing comments: what an excerpt must reproduce. Comments in an
// excerpt are annotations, except its expected output.
func codeLines(src string) []string {
	var out []string
	for _, l := range normalise(src) {
		if strings.HasPrefix(l, "//") {
			continue
		}
		if i := strings.Index(l, " //"); i >= 0 {
			l = strings.TrimSpace(l[:i])
		}
		out = append(out, l)
	}
	return out
}

// outputLines returns the normalised comment lines from "// Output:" on.
func outputLines(src string) []string {
	var out []string
	in := false
	for _, l := range normalise(src) {
		if strings.HasPrefix(l, "// Output:") {
			in = true
		}
		if in && strings.HasPrefix(l, "//") {
			out = append(out, l)
		}
	}
	return out
}

// checkExcerpt verifies a fragment: every code line of it, and its
// expected output, must be lines of the referenced Example functions
// (which go test compiles and runs); without a reference, its code lines
// must appear, consecutively, in one of the module's Go files. Other
// comments are annotations and not checked.
func checkExcerpt(t *testing.T, loc, src string, refs []string) {
	t.Helper()
	files, examples := source()
	lines := append(codeLines(src), outputLines(src)...)
	if len(refs) > 0 {
		have := map[string]bool{}
		for _, r := range refs {
			body, ok := examples[r]
			if !ok {
				t.Errorf("%s: the excerpt cites %s, which no _test.go file of the module defines", loc, r)
				return
			}
			for _, l := range body {
				have[l] = true
				if i := strings.Index(l, " //"); i >= 0 && !strings.HasPrefix(l, "//") {
					have[strings.TrimSpace(l[:i])] = true
				}
			}
		}
		for _, l := range lines {
			if !have[l] {
				t.Errorf("%s: excerpt line %q is not in %s: the excerpt drifted from its Example", loc, l, strings.Join(refs, ", "))
			}
		}
		return
	}
	for _, fl := range files {
		if containsInOrder(fl, codeLines(src)) {
			return
		}
	}
	t.Errorf("%s: a ```go block that is not a complete file must be followed by the Example it is cut from, e.g. (`ExampleX`), or be cut from the module's source; this one is found in neither (use ```text for pseudo-code)", loc)
}

// containsInOrder reports whether want appears in have as a run of
// consecutive lines.
func containsInOrder(have, want []string) bool {
	if len(want) == 0 {
		return true
	}
	for i := 0; i+len(want) <= len(have); i++ {
		if have[i] != want[0] {
			continue
		}
		j := 1
		for j < len(want) && have[i+j] == want[j] {
			j++
		}
		if j == len(want) {
			return true
		}
	}
	return false
}
