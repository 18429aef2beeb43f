package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// docFile documents every flag; TestConfigurationDoc keeps it true.
const docFile = "../../docs/configuration.md"

// cliFlag is one flag as the command line defines it.
type cliFlag struct {
	def  string // as the doc writes it: the value in backquotes, or none
	env  string // its environment variable(s)
	cmds []string
}

// cliFlags walks every command of the app and returns its flags by name.
// A name given to several commands must mean the same on all of them.
func cliFlags(t *testing.T) map[string]*cliFlag {
	t.Helper()
	flags := map[string]*cliFlag{}
	var walk func(parent string, cmds []*cli.Command)
	walk = func(parent string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			name := parent + " " + cmd.Name
			for _, f := range cmd.Flags {
				fname := f.Names()[0]
				if fname == "help" {
					continue
				}
				def, ok := docDefault(f)
				if !ok {
					t.Errorf("%s --%s is a %T: teach docDefault its default", name, fname, f)
					continue
				}
				var env string
				if d, ok := f.(cli.DocGenerationFlag); ok {
					env = strings.Join(d.GetEnvVars(), ", ")
				}
				if env == "" {
					t.Errorf("%s --%s has no environment variable", name, fname)
				}
				got := &cliFlag{def: def, env: env, cmds: []string{name}}
				if prev, ok := flags[fname]; ok {
					if prev.def != got.def || prev.env != got.env {
						t.Errorf("--%s differs between %s (default %s, %s) and %s (default %s, %s): one line of the doc cannot describe both",
							fname, prev.cmds[0], prev.def, prev.env, name, got.def, got.env)
					}
					prev.cmds = append(prev.cmds, name)
					continue
				}
				flags[fname] = got
			}
			walk(name, cmd.Subcommands)
		}
	}
	walk("wasmkeep", newApp().Commands)
	return flags
}

// docDefault is a flag's default as the doc's Default column writes it.
func docDefault(f cli.Flag) (string, bool) {
	quote := func(s string) string { return "`" + s + "`" }
	switch f := f.(type) {
	case *cli.StringFlag:
		if f.Value == "" {
			return "none", true
		}
		return quote(f.Value), true
	case *cli.IntFlag:
		return quote(strconv.Itoa(f.Value)), true
	case *cli.Int64Flag:
		return quote(strconv.FormatInt(f.Value, 10)), true
	case *cli.DurationFlag:
		return quote(f.Value.String()), true
	case *cli.BoolFlag:
		return quote(strconv.FormatBool(f.Value)), true
	case *cli.StringSliceFlag:
		if f.Value == nil || len(f.Value.Value()) == 0 {
			return "none", true
		}
		return quote(strings.Join(f.Value.Value(), ",")), true
	}
	return "", false
}

// docRow is one flag's line in a table of the doc.
type docRow struct {
	line     int
	def, env string
	what     string
}

var (
	rowFlag = regexp.MustCompile("^`--([a-z0-9-]+)`$")
	// A flag anywhere in the doc: two dashes and a name, not inside a
	// longer run of dashes or a word.
	anyFlag = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9-]*)`)
	// The default column: the value in backquotes (what may follow it, like
	// "(64 MiB)", is for the reader), or none.
	defCell = regexp.MustCompile("^(`[^`]*`|none)")
)

// TestConfigurationDoc fails when docs/configuration.md and the command
// line disagree: a flag without its line in a table, a line or a mention
// of a flag the command line does not have, or a default or environment
// variable that is not the flag's.
func TestConfigurationDoc(t *testing.T) {
	data, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	flags := cliFlags(t)
	if len(flags) < 19 {
		t.Fatalf("found only %d flags on the command line; is cliFlags walking every command?", len(flags))
	}

	rows := map[string]docRow{}
	for i, line := range strings.Split(string(data), "\n") {
		for _, m := range anyFlag.FindAllStringSubmatch(line, -1) {
			if _, ok := flags[m[1]]; !ok && m[1] != "help" {
				t.Errorf("%s:%d mentions --%s, which no command has", docFile, i+1, m[1])
			}
		}
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		m := rowFlag.FindStringSubmatch(cells[0])
		if m == nil {
			continue
		}
		if len(cells) != 4 {
			t.Errorf("%s:%d: the line of --%s has %d cells, want 4 (flag, default, environment, what it does)", docFile, i+1, m[1], len(cells))
			continue
		}
		if prev, ok := rows[m[1]]; ok {
			t.Errorf("%s:%d: --%s has a line already, at %d", docFile, i+1, m[1], prev.line)
			continue
		}
		rows[m[1]] = docRow{line: i + 1, def: defCell.FindString(cells[1]), env: strings.Trim(cells[2], "`"), what: cells[3]}
	}

	names := make([]string, 0, len(flags))
	for name := range flags {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f := flags[name]
		row, ok := rows[name]
		if !ok {
			t.Errorf("--%s (%s) has no line in a table of %s", name, strings.Join(f.cmds, ", "), docFile)
			continue
		}
		if row.def != f.def {
			t.Errorf("%s:%d: --%s defaults to %s, the doc says %q", docFile, row.line, name, f.def, row.def)
		}
		if row.env != f.env {
			t.Errorf("%s:%d: --%s reads %s, the doc says %q", docFile, row.line, name, f.env, row.env)
		}
		if len(row.what) < 20 {
			t.Errorf("%s:%d: --%s: say what it does", docFile, row.line, name)
		}
	}
	for name, row := range rows {
		if _, ok := flags[name]; !ok {
			t.Errorf("%s:%d documents --%s, which no command has", docFile, row.line, name)
		}
	}
}

// TestFlagDefaultsAreNamed: no flag writes its default as a literal. A
// default is the Default* constant of the package the flag configures (or
// a constant of the command's own, named once), so that the doc, checked
// against the flags by TestConfigurationDoc, also says what the packages
// do with a zero field.
func TestFlagDefaultsAreNamed(t *testing.T) {
	for _, v := range flagLiterals(t, ".") {
		t.Error(v)
	}
	// The rule is not vacuous: it finds the literals of a file that has
	// them, and only those.
	tmp := t.TempDir()
	src := `package main
import ("time"; "github.com/urfave/cli/v2")
var flags = []cli.Flag{
	&cli.IntFlag{Name: "a", Value: 256},
	&cli.DurationFlag{Name: "b", Value: 10 * time.Second},
	&cli.StringFlag{Name: "c", Value: "auto"},
	&cli.IntFlag{Name: "d", Value: defaultD},
	&cli.StringFlag{Name: "e", Value: "http://" + hostD},
}
`
	if err := os.WriteFile(filepath.Join(tmp, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := flagLiterals(t, tmp); len(got) != 3 {
		t.Errorf("the rule found %q in a file with three literal defaults", got)
	}
}

// flagLiterals lists the cli flags of dir's non-test files whose Value is
// a literal or holds a number.
func flagLiterals(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if sel, ok := lit.Type.(*ast.SelectorExpr); !ok || !strings.HasSuffix(sel.Sel.Name, "Flag") {
				return true
			}
			for _, e := range lit.Elts {
				kv, ok := e.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				if key, ok := kv.Key.(*ast.Ident); !ok || key.Name != "Value" {
					continue
				}
				if _, bare := kv.Value.(*ast.BasicLit); bare || holdsNumber(kv.Value) {
					out = append(out, fmt.Sprintf("%s: a flag's default written as a literal: name it (a package's Default* constant)", fset.Position(kv.Pos())))
				}
			}
			return true
		})
	}
	return out
}

// holdsNumber reports whether e has a numeric literal in it.
func holdsNumber(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if b, ok := n.(*ast.BasicLit); ok && b.Kind != token.STRING && b.Kind != token.CHAR {
			found = true
		}
		return !found
	})
	return found
}

// TestFlagEnvironmentNames: every flag reads WASMKEEP_ and its name in
// capitals, dashes as underscores; the clients' --token shares the node's
// WASMKEEP_ADMIN_TOKEN, as the doc says.
func TestFlagEnvironmentNames(t *testing.T) {
	for name, f := range cliFlags(t) {
		want := strings.Join(env(name), ", ")
		if name == "token" {
			want = strings.Join(env("admin-token"), ", ")
		}
		if f.env != want {
			t.Errorf("--%s reads %s, want %s", name, f.env, want)
		}
	}
}

// TestBenchCommandsInJustfile: every go test command that
// docs/PERFORMANCE.md gives for its figures is in the Justfile's bench
// recipe, so `just bench` reproduces the whole document.
func TestBenchCommandsInJustfile(t *testing.T) {
	perf, err := os.ReadFile("../../docs/PERFORMANCE.md")
	if err != nil {
		t.Fatal(err)
	}
	recipe := map[string]bool{}
	for _, line := range justRecipe(t, "bench") {
		recipe[line] = true
	}
	fenced, found := false, 0
	for i, line := range strings.Split(string(perf), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		cmd := strings.TrimSpace(line)
		if !fenced || !regexp.MustCompile(`^([A-Z_]+=\S+ )*go test `).MatchString(cmd) {
			continue
		}
		found++
		if !recipe[cmd] {
			t.Errorf("docs/PERFORMANCE.md:%d: %q is not in the Justfile's bench recipe", i+1, cmd)
		}
	}
	if found == 0 {
		t.Fatal("found no go test command in docs/PERFORMANCE.md")
	}
}

// justRecipe returns the command lines of a recipe of the Justfile.
func justRecipe(t *testing.T, name string) []string {
	t.Helper()
	just, err := os.ReadFile("../../Justfile")
	if err != nil {
		t.Fatal(err)
	}
	var recipe []string
	in := false
	for _, line := range strings.Split(string(just), "\n") {
		switch {
		case line == name+":":
			in = true
		case in && strings.HasPrefix(line, "    "):
			recipe = append(recipe, strings.TrimSpace(line))
		case in:
			in = false
		}
	}
	if len(recipe) == 0 {
		t.Fatalf("the Justfile has no %s recipe", name)
	}
	return recipe
}
