package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pure are the packages whose logic is kept apart from the world: no
// clock, no files, no network (they take the time and the facts as
// arguments), so that they can be tested and, for the cluster, simulated
// step by step.
var pure = []string{"abi", "host/phoenix", "host/snapshot", "host/engine/wasmrw", "host/rooms/life"}

// impure reports whether a pure package importing imp breaks the rule.
func impure(imp string) bool {
	for _, bad := range []string{"time", "os", "net"} {
		if imp == bad || strings.HasPrefix(imp, bad+"/") {
			return true
		}
	}
	return false
}

func TestPurePackagesImportNoClockFilesOrNetwork(t *testing.T) {
	pkgs := listPackages(t)
	for _, p := range pure {
		imports, ok := pkgs[module+"/"+p]
		if !ok {
			t.Errorf("no package %s", p)
			continue
		}
		for _, imp := range imports {
			if impure(imp) {
				t.Errorf("%s imports %s: a pure package takes the time and the facts as arguments", p, imp)
			}
		}
	}
	if !impure("net/http") || !impure("time") || impure("timeutil") {
		t.Error("impure is vacuous")
	}
}

// clocked are the packages that read the time only through the injected
// clock (internal/clock): nothing of package time that reads the clock or
// arms a timer, outside the file that adapts the clock.
var clocked = map[string]string{"alarms": "", "host/fronts": "", "host/rooms": "", "host/rooms/life": "", "host/socket": "deadline.go", "host/engine": "", "cluster": "", "cluster/member": "", "cluster/sim": ""}

// clockReads are the package time functions that read the real clock or
// arm real timers.
var clockReads = map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true}

func TestClockedPackagesUseTheInjectedClock(t *testing.T) {
	root := moduleRoot(t)
	for dir, exempt := range clocked {
		for _, v := range clockViolations(t, filepath.Join(root, dir), exempt) {
			t.Errorf("%s: %s", dir, v)
		}
	}
	// The rule is not vacuous: it finds the calls in a file that makes
	// them.
	tmp := t.TempDir()
	src := "package x\nimport \"time\"\nfunc f() { _ = time.Now(); go f(); <-time.After(1) }\n"
	if err := os.WriteFile(filepath.Join(tmp, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := clockViolations(t, tmp, ""); len(got) != 2 {
		t.Errorf("the clock rule found %q in a file calling time.Now and time.After", got)
	}
}

// cores start no goroutine: the lifecycle core returns decisions and the
// room manager owns every goroutine; the cluster core's and the cluster
// member's duties are steps that a server's runner (cluster/runner) and
// the simulation's scheduler drive, which only works if nothing in them
// runs on its own; and clusternode, the adapter between the member and
// the server, only translates.
var cores = []string{"host/rooms/life", "cluster", "cluster/member", "clusternode"}

// TestCoreStartsNoGoroutine: no go statement in a core.
func TestCoreStartsNoGoroutine(t *testing.T) {
	root := moduleRoot(t)
	for _, dir := range cores {
		for _, v := range goStatements(t, filepath.Join(root, dir)) {
			t.Errorf("%s: %s", dir, v)
		}
	}
	tmp := t.TempDir()
	src := "package x\nfunc f() { go f(); go func() {}() }\n"
	if err := os.WriteFile(filepath.Join(tmp, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := goStatements(t, tmp); len(got) != 2 {
		t.Errorf("the goroutine rule found %q in a file with two go statements", got)
	}
}

// goStatements lists the go statements in dir's files.
func goStatements(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range goFiles(t, dir) {
		ast.Inspect(f.file, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				out = append(out, f.fset.Position(g.Pos()).String()+": a go statement in a core")
			}
			return true
		})
	}
	return out
}

// seeded are the packages whose randomness comes from a *rand.Rand they
// are given, never from package math/rand's global source, so that a
// simulation's seed decides every draw and replays it.
var seeded = []string{"cluster", "cluster/member", "cluster/sim"}

// randConstructors are the math/rand/v2 functions that draw nothing from
// the global source.
var randConstructors = map[string]bool{"New": true, "NewPCG": true, "NewChaCha8": true, "NewZipf": true}

func TestSeededPackagesUseNoGlobalRandomness(t *testing.T) {
	root := moduleRoot(t)
	for _, dir := range seeded {
		for _, v := range globalRandomness(t, filepath.Join(root, dir)) {
			t.Errorf("%s: %s", dir, v)
		}
	}
	tmp := t.TempDir()
	src := "package x\nimport (\n\"math/rand/v2\"\nold \"math/rand\"\n)\nvar r = rand.New(rand.NewPCG(1, 2))\nfunc f() int { _ = old.Int(); return rand.IntN(3) + r.IntN(3) }\n"
	if err := os.WriteFile(filepath.Join(tmp, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := globalRandomness(t, tmp); len(got) != 2 {
		t.Errorf("the randomness rule found %q in a file importing math/rand and calling rand.IntN", got)
	}
}

// globalRandomness lists, in dir's files, imports of math/rand (v1, whose
// functions share a global source) and calls of math/rand/v2's global
// functions.
func globalRandomness(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range goFiles(t, dir) {
		randName := ""
		for _, imp := range f.file.Imports {
			switch imp.Path.Value {
			case `"math/rand"`:
				out = append(out, f.fset.Position(imp.Pos()).String()+": imports math/rand (use a *rand.Rand of math/rand/v2 passed in)")
			case `"math/rand/v2"`:
				randName = "rand"
				if imp.Name != nil {
					randName = imp.Name.Name
				}
			}
		}
		if randName == "" {
			continue
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == randName && id.Obj == nil && !randConstructors[sel.Sel.Name] {
					out = append(out, f.fset.Position(sel.Pos()).String()+": rand."+sel.Sel.Name+" draws from the global source (use the *rand.Rand passed in)")
				}
			}
			return true
		})
	}
	return out
}

type parsed struct {
	fset *token.FileSet
	file *ast.File
	name string
}

// goFiles parses the non-test Go files of dir.
func goFiles(t *testing.T, dir string) []parsed {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []parsed
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parsed{fset, f, e.Name()})
	}
	return out
}

// clockViolations lists the calls of package time's clock in dir's files
// other than exempt.
func clockViolations(t *testing.T, dir, exempt string) []string {
	t.Helper()
	var out []string
	for _, f := range goFiles(t, dir) {
		if f.name == exempt {
			continue
		}
		timeName := ""
		for _, imp := range f.file.Imports {
			if imp.Path.Value == `"time"` {
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
			}
		}
		if timeName == "" {
			continue
		}
		ast.Inspect(f.file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && clockReads[sel.Sel.Name] {
				out = append(out, f.fset.Position(sel.Pos()).String()+": time."+sel.Sel.Name+" (use the injected clock.Clock)")
			}
			return true
		})
	}
	return out
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}

// TestTheClusterAdapterCallsNoBucket: clusternode passes the bucket to
// the core and makes no call of package store itself (no read or write of
// a lease or record of its own): what the cluster decides from the bucket
// is the core's and the member's, which the simulation runs.
func TestTheClusterAdapterCallsNoBucket(t *testing.T) {
	for _, f := range goFiles(t, filepath.Join(moduleRoot(t), "clusternode")) {
		ast.Inspect(f.file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Get", "Put", "Delete", "List", "ListPage", "Look", "Acquire", "Take", "Park", "ReleaseParked", "Release", "Route":
					if id, ok := sel.X.(*ast.SelectorExpr); ok && (id.Sel.Name == "Bucket" || id.Sel.Name == "core") {
						t.Errorf("%s: clusternode calls %s.%s itself", f.fset.Position(call.Pos()), id.Sel.Name, sel.Sel.Name)
					}
				}
			}
			return true
		})
	}
}
