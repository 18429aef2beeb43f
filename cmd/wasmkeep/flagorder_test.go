package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// parsed is what a command's Action was given.
type parsed struct {
	command string            // its path: "cluster move"
	flags   map[string]string // the flags asked for, by name, as read
	args    []string
	ctx     *cli.Context
}

// parseCommand parses args (without the program's name) as wasmkeep does,
// with every command's Action replaced by one that records what it was
// given: the values of the named flags given on the command line (the
// test clears the environment), and its arguments. reached is false if
// no Action ran (a group of commands shown its help).
func parseCommand(args []string, flags ...string) (got parsed, reached bool, err error) {
	app := newApp()
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	app.ExitErrHandler = func(*cli.Context, error) {} // the error is returned, not exited with
	var replace func(parent string, cmds []*cli.Command)
	replace = func(parent string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			path := strings.TrimSpace(parent + " " + cmd.Name)
			if cmd.Action != nil {
				cmd.Action = func(c *cli.Context) error {
					got = parsed{command: path, flags: map[string]string{}, args: c.Args().Slice(), ctx: c}
					for _, f := range flags {
						// The innermost command given it (a parent's
						// flag is its own, as givenTo finds it).
						for _, x := range c.Lineage() {
							if x.Command != nil && hasFlag(x.Command.Flags, f) && x.IsSet(f) {
								got.flags[f] = fmt.Sprint(x.Value(f))
								break
							}
						}
					}
					reached = true
					return nil
				}
			}
			replace(path, cmd.Subcommands)
		}
	}
	replace("", app.Commands)
	err = app.Run(flagsFirst(app, append([]string{"wasmkeep"}, args...)))
	return got, reached, err
}

// clearEnvironment unsets the WASMKEEP_ variables for the test, so that
// only the command line sets flags.
func clearEnvironment(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "WASMKEEP_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// TestFlagsAfterArguments: every command reads its flags wherever they
// are among its arguments, up to a literal "--".
func TestFlagsAfterArguments(t *testing.T) {
	clearEnvironment(t)
	for _, c := range []struct {
		args    []string
		command string
		flags   map[string]string
		want    []string
	}{
		{[]string{"cluster", "move", "counter", "a", "--to", "n2"}, "cluster move", map[string]string{"to": "n2"}, []string{"counter", "a"}},
		{[]string{"cluster", "move", "--to", "n2", "counter", "a"}, "cluster move", map[string]string{"to": "n2"}, []string{"counter", "a"}},
		{[]string{"cluster", "move", "counter", "--to=n2", "a", "--server", "http://h:1"}, "cluster move", map[string]string{"to": "n2", "server": "http://h:1"}, []string{"counter", "a"}},
		{[]string{"cluster", "drain", "n2", "--wait", "--timeout", "1s"}, "cluster drain", map[string]string{"wait": "true", "timeout": "1s"}, []string{"n2"}},
		{[]string{"cluster", "drain", "n2", "--off"}, "cluster drain", map[string]string{"off": "true"}, []string{"n2"}},
		{[]string{"cluster", "fence", "n3", "--server", "http://h:1"}, "cluster fence", map[string]string{"server": "http://h:1"}, []string{"n3"}},
		{[]string{"rooms", "rm", "counter", "x", "--server", "http://h:1"}, "rooms rm", map[string]string{"server": "http://h:1"}, []string{"counter", "x"}},
		{[]string{"rooms", "--server", "http://h:1", "hibernate", "counter", "x"}, "rooms hibernate", map[string]string{"server": "http://h:1"}, []string{"counter", "x"}},
		{[]string{"rooms", "--interval", "1s", "--watch"}, "rooms", map[string]string{"watch": "true", "interval": "1s"}, nil},
		{[]string{"room", "export", "chat", "lobby", "-o", "out.wkroom"}, "room export", map[string]string{"output": "out.wkroom"}, []string{"chat", "lobby"}},
		{[]string{"class", "put", "counter", "counter.wasm", "--durability", "event", "--upgrade", "now"}, "class put", map[string]string{"durability": "event", "upgrade": "now"}, []string{"counter", "counter.wasm"}},
		{[]string{"class", "rollback", "chat", "--back-to", "abc"}, "class rollback", map[string]string{"back-to": "abc"}, []string{"chat"}},
		{[]string{"dev", "./myroom", "--class", "first"}, "dev", map[string]string{"class": "first"}, []string{"./myroom"}},
		{[]string{"serve", "--data", "d", "--listen", "127.0.0.1:0"}, "serve", map[string]string{"data": "d", "listen": "127.0.0.1:0"}, nil},
		// After "--", an argument that starts with a dash is an argument.
		{[]string{"rooms", "hibernate", "counter", "--", "-x", "--server"}, "rooms hibernate", map[string]string{}, []string{"counter", "-x", "--server"}},
		{[]string{"rooms", "hibernate", "counter", "--server", "http://h:1", "--", "-x"}, "rooms hibernate", map[string]string{"server": "http://h:1"}, []string{"counter", "-x"}},
		// "-" alone is an argument.
		{[]string{"room", "import", "-", "--name", "a"}, "room import", map[string]string{"name": "a"}, []string{"-"}},
	} {
		names := []string{"to", "server", "wait", "timeout", "off", "watch", "interval", "output", "durability", "upgrade", "back-to", "class", "data", "listen", "name"}
		got, reached, err := parseCommand(c.args, names...)
		if err != nil || !reached {
			t.Errorf("wasmkeep %s: error %v (an action ran: %v)", strings.Join(c.args, " "), err, reached)
			continue
		}
		if got.command != c.command || !maps(got.flags, c.flags) || !slices.Equal(got.args, c.want) {
			t.Errorf("wasmkeep %s: ran %q with flags %v and arguments %q; want %q with %v and %q",
				strings.Join(c.args, " "), got.command, got.flags, got.args, c.command, c.flags, c.want)
		}
	}

	// A flag the command does not have, after its arguments, is refused
	// as one.
	if _, reached, err := parseCommand([]string{"cluster", "move", "counter", "a", "--nope", "--to", "n2"}); reached || err == nil || !strings.Contains(err.Error(), "flag provided but not defined: -nope") {
		t.Errorf("an unknown flag after the arguments: error %v (an action ran: %v)", err, reached)
	}
	// Shell completion's flag stays last, where urfave/cli looks for it.
	app := newApp()
	if got := flagsFirst(app, []string{"wasmkeep", "cluster", "move", "counter", "--to", "n2", completionFlag}); got[len(got)-1] != completionFlag {
		t.Errorf("the completion flag moved: %q", got)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestDocClusterCommands: the commands docs/cluster.md gives, in its
// ```sh blocks and in its text (`wasmkeep cluster move CLASS NAME --to
// NODE`), parse as written: each reaches its command with its arguments
// (as many as the command's usage names) and every flag written, wherever
// it is, read as a flag. The doc test does not run them (they need a
// cluster); the commands of the other guides' ```sh blocks are checked
// the same way. (docs/PERFORMANCE.md's are not: their --target-pid PID is
// for the reader to fill in, and does not parse as a number.)
func TestDocClusterCommands(t *testing.T) {
	clearEnvironment(t)
	var commands []string
	for _, doc := range []string{"README.md", "docs/getting-started.md", "docs/operations.md", "docs/cluster.md", "docs/upgrades.md"} {
		data, err := os.ReadFile("../../" + doc)
		if err != nil {
			t.Fatal(err)
		}
		commands = append(commands, shCommands(string(data))...)
		if doc == "docs/cluster.md" {
			commands = append(commands, inlineCommands(string(data))...)
		}
	}
	after := 0 // commands with a flag after an argument
	for _, cmd := range commands {
		words := strings.Fields(cmd)
		var flags []string
		for _, w := range words {
			if name, ok := strings.CutPrefix(w, "--"); ok && name != "" {
				name, _, _ = strings.Cut(name, "=")
				flags = append(flags, name)
			}
		}
		got, reached, err := parseCommand(words, flags...)
		if err != nil || !reached {
			t.Errorf("%q: error %v (an action ran: %v)", cmd, err, reached)
			continue
		}
		for _, f := range flags {
			if _, ok := got.flags[f]; !ok {
				t.Errorf("%q: --%s was not read as a flag of %s", cmd, f, got.command)
			}
		}
		for _, a := range got.args {
			if strings.HasPrefix(a, "-") {
				t.Errorf("%q: %s was read as an argument of %s", cmd, a, got.command)
			}
		}
		usage := strings.Fields(got.ctx.Command.ArgsUsage)
		required := 0
		for _, u := range usage {
			if !strings.HasPrefix(u, "[") {
				required++
			}
		}
		if n := len(got.args); n < required || n > len(usage) {
			t.Errorf("%q: %s was given arguments %q; its usage is %q", cmd, got.command, got.args, got.ctx.Command.ArgsUsage)
		}
		if i := slices.IndexFunc(words, func(w string) bool { return strings.HasPrefix(w, "-") }); i >= 0 && len(got.args) > 0 && slices.Index(words, got.args[0]) < i {
			after++
		}
	}
	if len(commands) < 20 || after == 0 {
		t.Fatalf("found %d commands, %d with a flag after an argument: is the test reading the docs?\n%s", len(commands), after, strings.Join(commands, "\n"))
	}
}

// docCommand is a wasmkeep command as a doc writes it, the program's name
// (wasmkeep, or go run ./cmd/wasmkeep) apart.
var docCommand = regexp.MustCompile(`^(?:wasmkeep|go run \./cmd/wasmkeep)\s+(.*)$`)

// shCommands are the wasmkeep commands of a doc's ```sh blocks, run in the
// background or not; lines that are more than one command (pipes,
// substitutions) are left out.
func shCommands(doc string) []string {
	var out []string
	in := false
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "```") {
			in = !in && l == "```sh"
			continue
		}
		if !in {
			continue
		}
		cmd := strings.TrimSpace(lines[i])
		for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i])
		}
		cmd = strings.TrimSpace(strings.TrimSuffix(cmd, "&"))
		if m := docCommand.FindStringSubmatch(cmd); m != nil && !strings.ContainsAny(cmd, "|;`<>") && !strings.Contains(cmd, "$(") {
			out = append(out, m[1])
		}
	}
	return out
}

// inlineCommands are the command forms a doc's text gives in backquotes
// (`wasmkeep cluster move CLASS NAME --to NODE`, `cluster drain NODE`):
// those with an argument or a flag after the command, and no
// alternatives (a|b).
func inlineCommands(doc string) []string {
	var text []string // the doc without its fenced blocks
	in := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if !in {
			text = append(text, l)
		}
	}
	var out []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(strings.Join(text, "\n"), -1) {
		cmd := strings.Join(strings.Fields(m[1]), " ")
		if !strings.HasPrefix(cmd, "wasmkeep ") {
			cmd = "wasmkeep " + cmd
		}
		words := strings.Fields(cmd)
		if len(words) < 4 || strings.ContainsAny(cmd, "|[") || !slices.ContainsFunc(newApp().Commands, func(c *cli.Command) bool { return c.Name == words[1] }) {
			continue
		}
		out = append(out, docCommand.FindStringSubmatch(cmd)[1])
	}
	return out
}
