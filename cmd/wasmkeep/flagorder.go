package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// completionFlag is the flag urfave/cli's shell completion passes last.
const completionFlag = "--generate-bash-completion"

// flagsFirst returns args (the program's name first, as os.Args) with the
// flags of every command moved in front of its arguments, so that
// `wasmkeep cluster move counter a --to n2` reads --to as a flag.
// urfave/cli v2 stops reading a command's flags at its first argument (Go's
// flag package does) and has no option to go on; v1's reordering is gone.
//
// It walks the command line as urfave/cli will: at each command, its
// leading flags, then a subcommand's name hands the rest to that
// subcommand; otherwise the rest are the command's own flags and
// arguments, and every argument that starts with "-" moves in front of the
// others with its value (the next argument, for a flag that takes one and
// is not written --flag=value). A literal "--" ends the flags: it and
// everything after it stay as they are, after the moved flags. A flag the
// command does not define moves alone, and the parse then refuses it.
func flagsFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	rest, tail := args[1:], []string(nil)
	if app.EnableBashCompletion && rest[len(rest)-1] == completionFlag {
		rest, tail = rest[:len(rest)-1], rest[len(rest)-1:]
	}
	out := append([]string{args[0]}, reorder(app.Flags, app.Commands, app.Action != nil, rest)...)
	return append(out, tail...)
}

// reorder puts the flags of one command's args in front: flags are its
// flags, cmds its subcommands, and runs tells whether it runs on its own
// arguments (it has an Action) when they name no subcommand.
func reorder(flags []cli.Flag, cmds []*cli.Command, runs bool, args []string) []string {
	var lead []string
	i := 0
	for i < len(args) && isFlag(args[i]) {
		n := flagWidth(flags, args, i)
		lead = append(lead, args[i:i+n]...)
		i += n
	}
	if i < len(args) && args[i] != "--" {
		if sub := findCommand(cmds, args[i]); sub != nil {
			rest := args[i+1:]
			if !sub.SkipFlagParsing {
				rest = reorder(sub.Flags, sub.Subcommands, sub.Action != nil, rest)
			}
			return append(append(lead, args[i]), rest...)
		}
		if len(cmds) > 0 && !runs {
			// An unknown subcommand: left for urfave/cli to name.
			return args
		}
	}
	var moved, positional []string
	for ; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--":
			return join(lead, moved, args[i:i+1], positional, args[i+1:])
		case isFlag(a):
			n := flagWidth(flags, args, i)
			moved = append(moved, args[i:i+n]...)
			i += n - 1
		default:
			positional = append(positional, a)
		}
	}
	return join(lead, moved, positional)
}

// isFlag tells whether a reads as a flag: a dash and more, but not "--"
// ("-" alone is an argument, stdin by convention).
func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' && a != "--" }

// flagWidth is how many arguments the flag at args[i] spans: two for a
// flag that takes a value given as the next argument, else one.
func flagWidth(flags []cli.Flag, args []string, i int) int {
	name, _, withValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
	if withValue || i+1 == len(args) {
		return 1
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if v, ok := f.(interface{ TakesValue() bool }); ok && !v.TakesValue() {
				return 1 // a boolean: --wait, never --wait VALUE
			}
			return 2
		}
	}
	return 1 // not defined (or help): the parse refuses it or shows help
}

// findCommand is the command of cmds named (or aliased) name, or nil.
func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
