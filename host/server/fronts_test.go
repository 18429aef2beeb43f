package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/classes"
)

// TestRoutesAreNodePaths: every route the server registers is the landing
// page or under one of classes.NodePaths, the paths no front may claim, so
// that a route added to the node is one no front holds. It reads the
// routes off the package's source: the first argument of each Handle and
// HandleFunc call that is a string literal.
func TestRoutesAreNodePaths(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			pattern, _ := strconv.Unquote(lit.Value)
			if _, p, ok := strings.Cut(pattern, " "); ok {
				pattern = p // the method goes
			}
			found++
			if pattern == "/" || pattern == "/{$}" {
				return true // the fronts' and the landing page's
			}
			path, _, _ := strings.Cut(pattern, "{")
			path = strings.TrimSuffix(path, "/")
			for _, np := range classes.NodePaths {
				if classes.UnderPrefix(path, np) {
					return true
				}
			}
			t.Errorf("%s: the route %q is under none of classes.NodePaths: a front could claim it", name, pattern)
			return true
		})
	}
	if found < 20 {
		t.Fatalf("found %d routes: is the test reading the server's source?", found)
	}
}
