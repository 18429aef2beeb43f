// Command wasmkeep runs a node of WebAssembly rooms and talks to running
// nodes: `wasmkeep serve` starts one, `wasmkeep class` and `wasmkeep rooms`
// manage it through its admin API, and `wasmkeep demo` starts a node with the
// example classes built from source.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:  "wasmkeep",
		Usage: "a host for WebAssembly rooms that hibernate with their sockets open",
		Commands: []*cli.Command{
			serveCommand(),
			demoCommand(),
			classCommand(),
			roomsCommand(),
		},
		EnableBashCompletion: true,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "wasmkeep:", err)
		os.Exit(1)
	}
}
