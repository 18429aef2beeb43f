// Command wasmkeep runs a node of WebAssembly rooms and talks to running
// nodes: `wasmkeep serve` starts one, `wasmkeep class`, `wasmkeep rooms` and
// `wasmkeep room` manage it through its admin API, `wasmkeep cluster` the
// nodes of a cluster through any one's, `wasmkeep demo` starts a node with the
// example classes built from source, `wasmkeep dev` starts one that builds
// and uploads the room of a directory on every save, and `wasmkeep bench`
// loads rooms with WebSocket messages or HTTP requests.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := newApp()
	if err := app.Run(flagsFirst(app, os.Args)); err != nil {
		fmt.Fprintln(os.Stderr, "wasmkeep:", err)
		os.Exit(1)
	}
}

// newApp is the command line: every command and flag (docs_test.go checks
// docs/configuration.md against it).
func newApp() *cli.App {
	app := &cli.App{
		Name:  "wasmkeep",
		Usage: "a host for WebAssembly rooms that hibernate with their sockets open",
		Commands: []*cli.Command{
			serveCommand(),
			demoCommand(),
			classCommand(),
			secretCommand(),
			roomsCommand(),
			roomCommand(),
			clusterCommand(),
			benchCommand(),
			devCommand(),
			initCommand(),
		},
		// Without it urfave/cli answers an unknown command with "No help
		// topic for ..." and exit code 3.
		CommandNotFound: func(c *cli.Context, name string) {
			parent := "wasmkeep"
			if c.Command != nil && c.Command.Name != "" && c.Command.Name != parent {
				parent += " " + c.Command.FullName()
			}
			cli.HandleExitCoder(cli.Exit(fmt.Sprintf("%s: unknown command %q (see %[1]s --help)", parent, name), 2))
		},
		EnableBashCompletion: true,
	}
	app.OnUsageError = usageError("wasmkeep")
	setUsageErrors("wasmkeep", app.Commands)
	return app
}

// setUsageErrors makes a flag urfave/cli cannot parse (unknown, or a value
// that does not parse, from the command line or the environment) exit with
// code 2 and one line on stderr, like the commands' other usage errors,
// rather than code 1 and the whole help on stdout.
func setUsageErrors(parent string, cmds []*cli.Command) {
	for _, cmd := range cmds {
		name := parent + " " + cmd.Name
		cmd.OnUsageError = usageError(name)
		setUsageErrors(name, cmd.Subcommands)
	}
}

func usageError(name string) cli.OnUsageErrorFunc {
	return func(_ *cli.Context, err error, _ bool) error {
		return cli.Exit(fmt.Sprintf("%s: %v (see %[1]s --help)", name, err), 2)
	}
}
