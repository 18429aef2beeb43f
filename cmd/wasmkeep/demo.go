package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// demoClasses are the examples the demo serves, by class name.
var demoClasses = []string{"counter", "chat"}

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "build the example classes from source and serve them (run it inside the wasmkeep source tree)",
		Flags: serveFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := nodeConfig(c)
			if err != nil {
				return err
			}
			root, err := wasmbuild.ModuleRoot()
			if err != nil {
				return fmt.Errorf("the demo builds the examples from the wasmkeep source tree; run it there: %w", err)
			}
			// Held before the build, which writes into the directory and
			// can take minutes: a second demo is refused at once. From
			// run on, the node releases it.
			if cfg.Hold, err = node.HoldDataDir(cfg.DataDir); err != nil {
				return dataDirAdvice(err)
			}
			modules, err := buildExamples(cfg.Logger, root, filepath.Join(cfg.DataDir, "examples"))
			if err != nil {
				_ = cfg.Hold.Release()
				return err
			}
			return run(c.Context, cfg, func(n *node.Node) error {
				for _, name := range demoClasses {
					rec, err := n.Classes.Put(context.Background(), name, modules[name], classes.Options{})
					if err != nil {
						return fmt.Errorf("loading %s: %w", name, err)
					}
					cfg.Logger.Info("class loaded", "class", name, "hash", rec.Hash)
				}
				fmt.Fprintf(c.App.Writer, "\nwasmkeep demo is up:\n"+
					"  chat:     open %[1]s/actor/chat/lobby in two browser tabs\n"+
					"  counter:  curl -X POST %[1]s/actor/counter/mine\n"+
					"  rooms:    go run ./cmd/wasmkeep rooms --server %[1]s\n"+
					"Rooms hibernate after %[2]s idle; Ctrl-C stops the node cleanly.\n\n",
					n.URL(), c.Duration("idle-timeout"))
				return nil
			})
		},
	}
}

// buildExamples builds the demo's classes from the source tree at root
// into the directory out and returns them by class name.
func buildExamples(log *slog.Logger, root, out string) (map[string][]byte, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	modules := map[string][]byte{}
	for _, name := range demoClasses {
		file := filepath.Join(out, name+".wasm")
		log.Info("building example", "class", name, "out", file)
		if err := wasmbuild.BuildTo(filepath.Join(root, "examples", name), file); err != nil {
			return nil, fmt.Errorf("building examples/%s: %w", name, err)
		}
		var err error
		if modules[name], err = os.ReadFile(file); err != nil {
			return nil, err
		}
	}
	return modules, nil
}
