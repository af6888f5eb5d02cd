package all_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/adapters"
	_ "github.com/sluicemq/sluice/adapters/all"
)

// schemes are every scheme the module's adapters register.
var schemes = []string{
	"activemq", "activemq+ssl", "amqp", "amqps", "kafka", "kafka+tls", "kafkaqueue", "kafkaqueues", "mem",
	"mqtt", "mqtt+embedded", "mqtts", "pulsar", "pulsar+ssl", "redis", "rediss", "rocketmq",
}

func TestEverySchemeRegistered(t *testing.T) {
	got := adapters.Schemes()
	for _, s := range schemes {
		if !slices.Contains(got, s) {
			t.Errorf("scheme %s not registered by adapters/all (registered: %v)", s, got)
		}
	}
	for _, s := range got {
		if !slices.Contains(schemes, s) {
			t.Errorf("scheme %s is registered but not in this test's list: add it here, to secrets_test.go and to FuzzOpenURL's seeds", s)
		}
	}
}

// TestEveryRegisteringPackageImported fails when a package under
// adapters/ registers a scheme (an init function of a non-test file calls
// a Register or RegisterBroker function: adapters' or a helper's such as
// kafkawire.Register) and adapters/all does not import it: its doc promises every
// adapter.
func TestEveryRegisteringPackageImported(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "all.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	imported := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		imported[p] = true
	}
	var registering []string
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "internal" && path != "..") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		if dir := filepath.Dir(path); dir != ".." && registersInInit(f) {
			pkg := "github.com/sluicemq/sluice/adapters/" + filepath.ToSlash(strings.TrimPrefix(dir, "../"))
			if !slices.Contains(registering, pkg) {
				registering = append(registering, pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(registering) < 8 {
		t.Fatalf("found only %d packages that register a scheme (%v): the walk is broken", len(registering), registering)
	}
	for _, pkg := range registering {
		if !imported[pkg] {
			t.Errorf("%s registers a scheme but adapters/all does not import it", pkg)
		}
	}
}

// registersInInit reports whether an init function of f calls a function
// named Register or RegisterBroker (of any package).
func registersInInit(f *ast.File) bool {
	found := false
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != "init" || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Register" || sel.Sel.Name == "RegisterBroker") {
					found = true
				}
			}
			return !found
		})
	}
	return found
}
