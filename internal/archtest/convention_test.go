package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The conventions of docs/architecture.md ("Conventions") that a reader of
// the code could not otherwise rely on: every sentinel error names its
// package, and every Config fills in its defaults from Default* constants.

// conventionRoots are the trees the conventions hold in.
var conventionRoots = []string{"abi", "cmd", "host", "internal", "guest-sdk"}

func TestSentinelErrorsNameTheirPackage(t *testing.T) {
	root := moduleRoot(t)
	for _, dir := range packageDirs(t, root, conventionRoots) {
		for _, v := range sentinelViolations(t, dir) {
			t.Error(v)
		}
	}
	// The rule is not vacuous: it finds the sentinels of a file that
	// breaks it, whether they stand alone or in a block.
	tmp := t.TempDir()
	src := "package x\nimport \"errors\"\n" +
		"var ErrA = errors.New(\"a\")\n" +
		"var ErrB = errors.New(\"x: b\")\n" +
		"var (\n\tErrC = errors.New(\"y: c\")\n\tErrD = errors.New(\"x: \" + \"d\")\n\terrE = errors.New(\"e\")\n)\n"
	writeFile(t, filepath.Join(tmp, "x.go"), src)
	if got := sentinelViolations(t, tmp); len(got) != 2 || !strings.Contains(got[0], "ErrA") || !strings.Contains(got[1], "ErrC") {
		t.Errorf("the sentinel rule found %q in a file with ErrA and ErrC unprefixed", got)
	}
}

// sentinelViolations lists the exported package-level errors.New sentinels
// of dir whose message does not begin with the package's name and ": "
// (for a command, its directory's name: what it prints before its errors).
func sentinelViolations(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range goFiles(t, dir) {
		prefix := f.file.Name.Name + ": "
		if prefix == "main: " {
			prefix = filepath.Base(dir) + ": "
		}
		errorsName := importName(f.file, "errors")
		for _, decl := range f.file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Err") || i >= len(vs.Values) {
						continue
					}
					msg, ok := errorsNewMessage(vs.Values[i], errorsName)
					if ok && !strings.HasPrefix(msg, prefix) {
						out = append(out, fmt.Sprintf("%s: %s = errors.New(%q): begin it with %q", f.fset.Position(name.Pos()), name.Name, msg, prefix))
					}
				}
			}
		}
	}
	return out
}

// errorsNewMessage returns the leading string literal of an
// errors.New(...) call, the first operand of a concatenation included.
func errorsNewMessage(e ast.Expr, errorsName string) (string, bool) {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) != 1 || !isSelector(call.Fun, errorsName, "New") {
		return "", false
	}
	arg := call.Args[0]
	for {
		bin, ok := arg.(*ast.BinaryExpr)
		if !ok {
			break
		}
		arg = bin.X
	}
	lit, ok := arg.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func TestConfigDefaultsAreNamed(t *testing.T) {
	root := moduleRoot(t)
	configs := 0
	for _, dir := range packageDirs(t, root, conventionRoots) {
		n, vs := defaultsViolations(t, dir)
		configs += n
		for _, v := range vs {
			t.Error(v)
		}
	}
	if configs < 8 {
		t.Errorf("found %d Configs with defaults; is the walk missing packages?", configs)
	}
	// The rule is not vacuous: in a file that breaks it every way, it finds
	// each break.
	tmp := t.TempDir()
	src := `package x
import "time"
type Config struct {
	// A is a count (default DefaultA).
	A int
	// B is a time (default 1s).
	B time.Duration
	// C has a default that nothing fills in.
	C int
	D int
}
const DefaultA = 3
func (c Config) withDefaults() Config {
	if c.A == 0 {
		c.A = DefaultA
	}
	if c.B == 0 {
		c.B = time.Second
	}
	if c.D == -1 {
		return c
	}
	c.D = 7
	return c
}
// Options documents a default (default 2) it never fills in.
type Options struct {
	// E is off by default.
	E int
}
`
	writeFile(t, filepath.Join(tmp, "x.go"), src)
	if n, got := defaultsViolations(t, tmp); n != 2 || len(got) != 5 {
		t.Errorf("the defaults rule found %d Configs and %d breaks in a file with 2 and 5 (B, C, D's -1, D, Options):\n%s", n, len(got), strings.Join(got, "\n"))
	}
}

// defaultsViolations checks the exported Config and Options structs of dir
// whose fields document a default: the package fills them in in one method
// of the type, withDefaults; every field that documents a default is set
// there; a default comes from a constant named Default<Field> (of this
// package or another), unless it is built (a call, a literal of a struct,
// a function: a logger, a clock, a metrics set, not a limit); and "off" is
// spelled limits.Off, never as a negative number. It returns how many such
// structs it checked.
func defaultsViolations(t *testing.T, dir string) (int, []string) {
	t.Helper()
	files := goFiles(t, dir)
	funcs := map[string]bool{}
	methods := map[string]*ast.FuncDecl{} // type name → its withDefaults
	for _, f := range files {
		for _, d := range f.file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if fn.Recv == nil {
				funcs[fn.Name.Name] = true
				continue
			}
			if fn.Name.Name == "withDefaults" {
				methods[receiverType(fn)] = fn
			}
		}
	}
	var out []string
	checked := 0
	for _, f := range files {
		pos := f.fset.Position
		ast.Inspect(f.file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !ts.Name.IsExported() || !(strings.HasSuffix(ts.Name.Name, "Config") || strings.HasSuffix(ts.Name.Name, "Options")) {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			documented := map[string]bool{}
			for _, field := range st.Fields.List {
				if mentionsDefault(field.Doc) || mentionsDefault(field.Comment) {
					for _, name := range field.Names {
						documented[name.Name] = true
					}
				}
			}
			if len(documented) == 0 {
				return true
			}
			checked++
			fn := methods[ts.Name.Name]
			if fn == nil {
				out = append(out, fmt.Sprintf("%s: %s documents defaults and has no withDefaults method to fill them in", pos(ts.Pos()), ts.Name.Name))
				return true
			}
			set, vs := defaultsOf(fn, funcs, pos)
			out = append(out, vs...)
			for name := range documented {
				if !set[name] {
					out = append(out, fmt.Sprintf("%s: %s.%s documents a default that withDefaults does not fill in", pos(ts.Pos()), ts.Name.Name, name))
				}
			}
			return true
		})
	}
	return checked, out
}

// defaultsOf reads a withDefaults method: the fields it sets, and what
// breaks the rules in it.
func defaultsOf(fn *ast.FuncDecl, funcs map[string]bool, pos func(token.Pos) token.Position) (map[string]bool, []string) {
	recv := ""
	if names := fn.Recv.List[0].Names; len(names) == 1 {
		recv = names[0].Name
	}
	set := map[string]bool{}
	var out []string
	// check records that field gets value, a default unless it is computed
	// from the Config itself.
	check := func(field string, value ast.Expr) {
		set[field] = true
		if value == nil || mentions(value, recv) || built(value, funcs) {
			return
		}
		want := "Default" + field
		if id, ok := value.(*ast.Ident); ok && id.Name == want {
			return
		}
		if sel, ok := value.(*ast.SelectorExpr); ok && sel.Sel.Name == want {
			return
		}
		out = append(out, fmt.Sprintf("%s: the default of %s is not a constant %s", pos(value.Pos()), field, want))
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, lhs := range n.Lhs {
				if field := fieldOf(lhs, recv); field != "" && i < len(n.Rhs) {
					check(field, n.Rhs[i])
				}
			}
		case *ast.CallExpr:
			// A helper given the field's address: its other argument is
			// the default.
			for i, arg := range n.Args {
				u, ok := arg.(*ast.UnaryExpr)
				if !ok || u.Op != token.AND {
					continue
				}
				if field := fieldOf(u.X, recv); field != "" {
					var value ast.Expr
					if len(n.Args) == 2 {
						value = n.Args[1-i]
					}
					check(field, value)
				}
			}
		case *ast.UnaryExpr:
			if lit, ok := n.X.(*ast.BasicLit); ok && n.Op == token.SUB && lit.Kind != token.STRING {
				out = append(out, fmt.Sprintf("%s: -%s in withDefaults: a limit is off by limits.Off", pos(n.Pos()), lit.Value))
			}
		}
		return true
	})
	return set, out
}

// fieldOf returns F for recv.F.
func fieldOf(e ast.Expr, recv string) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); ok && id.Name == recv {
		return sel.Sel.Name
	}
	return ""
}

// built reports whether a value is made rather than named: a call, a
// composite literal, a function (literal or declared), nil.
func built(e ast.Expr, funcs map[string]bool) bool {
	switch e := e.(type) {
	case *ast.CallExpr, *ast.CompositeLit, *ast.FuncLit:
		return true
	case *ast.UnaryExpr:
		return e.Op == token.AND
	case *ast.Ident:
		return e.Name == "nil" || funcs[e.Name]
	}
	return false
}

// mentions reports whether e refers to name.
func mentions(e ast.Expr, name string) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == name {
			found = true
		}
		return !found
	})
	return found
}

func mentionsDefault(g *ast.CommentGroup) bool {
	return g != nil && strings.Contains(strings.ToLower(g.Text()), "default")
}

// receiverType is the name of a method's receiver type.
func receiverType(fn *ast.FuncDecl) string {
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func isSelector(e ast.Expr, pkg, name string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// importName is the name path is imported under in f ("" if it is not).
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if imp.Path.Value == strconv.Quote(path) {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return filepath.Base(path)
		}
	}
	return ""
}

// packageDirs lists the directories under root's trees that hold Go
// files, leaving out test data and npm's.
func packageDirs(t *testing.T, root string, trees []string) []string {
	t.Helper()
	var dirs []string
	for _, tree := range trees {
		err := filepath.WalkDir(filepath.Join(root, tree), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			switch d.Name() {
			case "testdata", "node_modules":
				return filepath.SkipDir
			}
			if m, _ := filepath.Glob(filepath.Join(path, "*.go")); len(m) > 0 {
				dirs = append(dirs, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dirs
}

func writeFile(t *testing.T, path, src string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}
