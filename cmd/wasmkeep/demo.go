package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// demoClasses are the examples the demo serves, by class name.
var demoClasses = []string{"counter", "chat"}

// parentPoll is how often the demo checks that the process that started
// it is still there.
const parentPoll = 100 * time.Millisecond

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
			ctx, stop := stopWithParent(c.Context, cfg.Logger)
			defer stop()
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
			if ctx.Err() != nil { // stopped while building
				_ = cfg.Hold.Release()
				return nil
			}
			return run(ctx, cfg, func(n *node.Node) error {
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

// stopWithParent returns a context that is also cancelled when the process
// that started this one ends, so that the demo stops cleanly when started
// by `go run` and the go command is what gets the signal. The go command
// runs the program as its child and waits: it ignores SIGINT and SIGQUIT
// (a terminal sends those to the whole process group, the program
// included) and dies of SIGTERM, which it does not pass on. The program
// would then go on serving, orphaned, with the port and the data directory
// held. An orphan's parent process id changes (to 1, or to the nearest
// subreaper), which is what the demo watches for. A SIGINT sent to the go
// command alone reaches nothing at all: send SIGTERM, or signal the group.
//
// serve does not do this: a service manager signals it directly, and a
// node started with nohup from a shell must outlive the shell.
func stopWithParent(ctx context.Context, log *slog.Logger) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	parent := os.Getppid()
	go func() {
		tick := time.NewTicker(parentPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if os.Getppid() != parent {
					log.Info("the process that started the demo has ended (go run was stopped)", "parent_pid", parent)
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}
