package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// demoClasses are the examples the demo serves, by class name: the
// counter, the chat, and the app of a front (site, under demoFronts'
// prefixes), a lobby and its tables.
var demoClasses = []string{"counter", "chat", "lobby", "table", "site"}

// demoFronts are the demo's fronts and their path prefixes.
var demoFronts = map[string][]string{"site": {"/app"}}

// parentPoll is how often the demo checks that the process that started
// it is still there.
const parentPoll = 100 * time.Millisecond

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "build the example classes from source and serve them (run it inside the wasmkeep source tree)",
		Flags: append(serveFlags(), &cli.IntFlag{Name: "nodes", Value: defaultDemoNodes, Usage: "run a cluster of this many nodes in this process, on --listen's port and the next ones, sharing a directory store in --data, with a generated cluster secret", EnvVars: env("nodes")}),
		Action: func(c *cli.Context) error {
			cfg, err := nodeConfig(c)
			if err != nil {
				return err
			}
			nodes := c.Int("nodes")
			if nodes < 1 || nodes > maxDemoNodes {
				return cli.Exit(fmt.Sprintf("wasmkeep: --nodes must be 1–%d, not %d", maxDemoNodes, nodes), 2)
			}
			var dc demoCluster
			if nodes > 1 {
				if cfg.Bucket != nil || cfg.Cluster != nil {
					return cli.Exit("wasmkeep: demo --nodes makes its own cluster on a directory in --data; it takes no --store or --node", 2)
				}
				// Checked before the build, which writes into --data.
				if dc, err = demoClusterFlags(c, cfg, nodes); err != nil {
					return err
				}
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
			if nodes > 1 {
				return runDemoCluster(ctx, c, cfg, dc, modules)
			}
			return run(ctx, cfg, func(n *node.Node) error {
				if err := loadDemoClasses(cfg.Logger, n, modules); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "\nwasmkeep demo is up:\n"+
					"  chat:     open %[1]s/actor/chat/lobby in two browser tabs\n"+
					"  app:      open %[1]s/app (a front, a lobby and tables that call each other)\n"+
					"  counter:  curl -X POST %[1]s/actor/counter/mine\n"+
					"  rooms:    go run ./cmd/wasmkeep rooms --server %[1]s\n"+
					"Rooms hibernate after %[2]s idle; Ctrl-C stops the node cleanly.\n\n",
					n.URL(), c.Duration("idle-timeout"))
				return nil
			})
		},
	}
}

// loadDemoClasses uploads the demo's classes through n.
func loadDemoClasses(log *slog.Logger, n *node.Node, modules map[string][]byte) error {
	for _, name := range demoClasses {
		rec, err := n.Classes.Put(context.Background(), name, modules[name], classes.Options{Front: demoFronts[name]})
		if err != nil {
			return fmt.Errorf("loading %s: %w", name, err)
		}
		log.Info("class loaded", "class", name, "hash", rec.Hash)
	}
	return nil
}

// maxDemoNodes bounds demo --nodes: a cluster to try on one machine.
const maxDemoNodes = 9

// defaultDemoNodes: the demo is a single node unless asked for a cluster.
const defaultDemoNodes = 1

// demoSecretBytes is the size of the demo cluster's generated secret.
const demoSecretBytes = 32

// demoCluster is the cluster demo --nodes runs: its size, its first
// node's address, its secret and its timing.
type demoCluster struct {
	nodes  int
	host   string
	port   int
	secret []byte
	timing memberTiming
}

// demoClusterFlags reads and checks the flags of a demo cluster of n
// nodes; a secret is drawn unless one is given.
func demoClusterFlags(c *cli.Context, cfg node.Config, n int) (demoCluster, error) {
	dc := demoCluster{nodes: n}
	host, portText, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return dc, cli.Exit(fmt.Sprintf("wasmkeep: --listen %q: %v", cfg.Listen, err), 2)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port+n-1 > 65535 {
		return dc, cli.Exit(fmt.Sprintf("wasmkeep: demo --nodes %d needs --listen with a port from 1 to %d, not %q", n, 65536-n, portText), 2)
	}
	dc.host, dc.port = host, port
	dc.secret = []byte(c.String("cluster-secret"))
	if len(dc.secret) == 0 {
		raw := make([]byte, demoSecretBytes)
		if _, err := rand.Read(raw); err != nil {
			return dc, err
		}
		dc.secret = []byte(hex.EncodeToString(raw))
	} else if len(dc.secret) < minSecretBytes {
		return dc, cli.Exit(fmt.Sprintf("wasmkeep: --cluster-secret must be at least %d bytes", minSecretBytes), 2)
	}
	if dc.timing, err = clusterTiming(c); err != nil {
		return dc, cli.Exit("wasmkeep: "+err.Error(), 2)
	}
	return dc, nil
}

// runDemoCluster runs a cluster of n nodes, n1..nN, in this process until
// ctx ends (or a node is fenced), then stops them all cleanly. Node i
// listens on --listen's port + i-1 and keeps its state in <data>/nodes/n<i>;
// the nodes share one compilation cache, <data>/cache, the directory store <data>/cluster
// and a secret drawn for the run. The classes are uploaded once, through
// n1: the others read them from the store.
func runDemoCluster(ctx context.Context, c *cli.Context, cfg node.Config, dc demoCluster, modules map[string][]byte) (err error) {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	hold := cfg.Hold
	defer func() {
		if hold != nil {
			_ = hold.Release()
		}
	}()
	n, host, port, secret, timing := dc.nodes, dc.host, dc.port, dc.secret, dc.timing
	shared, err := store.OpenDir(filepath.Join(cfg.DataDir, "cluster"))
	if err != nil {
		return err
	}
	defer shared.Close()

	var nodes []*node.Node
	stopAll := func() error {
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, nd := range nodes {
			wg.Go(func() { errs[i] = nd.Stop(context.Background()) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	lost := make(chan string, n)
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		ncfg := cfg
		ncfg.Hold = nil
		ncfg.DataDir = filepath.Join(cfg.DataDir, "nodes", name)
		if ncfg.Engine.CacheDir == "" {
			// One compilation cache for the nodes of this process: a
			// class is compiled once, not once a node.
			ncfg.Engine.CacheDir = filepath.Join(cfg.DataDir, "cache")
		}
		ncfg.Listen = net.JoinHostPort(host, strconv.Itoa(port+i))
		ncfg.Bucket = shared
		ncfg.Logger = cfg.Logger.With("demo_node", name)
		ncfg.Cluster = memberConfig(name, secret, "", timing)
		nd, err := node.Start(ctx, ncfg)
		if err != nil {
			return errors.Join(fmt.Errorf("starting node %s: %w", name, dataDirAdvice(err)), stopAll())
		}
		nodes = append(nodes, nd)
		go func() {
			select {
			case <-nd.Lost():
				lost <- name
			case <-ctx.Done():
			}
		}()
	}
	// The nodes serve before they have joined: the banner waits until
	// each answers /readyz, as a load balancer would, so that what it
	// offers works through every node.
	cfg.Logger.Info("waiting for every node to join the cluster")
	for i, nd := range nodes {
		if err := waitReady(ctx, nd.URL(), demoJoinWait(timing.ttl)); err != nil {
			if ctx.Err() != nil { // stopped while waiting
				return stopAll()
			}
			return errors.Join(fmt.Errorf("node n%d did not join the cluster: %w", i+1, err), stopAll())
		}
	}
	if err := loadDemoClasses(cfg.Logger, nodes[0], modules); err != nil {
		return errors.Join(err, stopAll())
	}
	// Every node compiles the classes now (from the shared cache after
	// the first), not at its first request: a room first reached
	// through n3 would otherwise wait for a compile.
	for _, nd := range nodes[1:] {
		for _, name := range demoClasses {
			if _, err := nd.Classes.Current(ctx, name); err != nil {
				return errors.Join(fmt.Errorf("compiling %s: %w", name, err), stopAll())
			}
		}
	}
	// Written in one piece, so that a reader of the output never sees
	// the banner's first line without the nodes' URLs.
	var w strings.Builder
	fmt.Fprintf(&w, "\nwasmkeep demo is up: a cluster of %d nodes sharing %s\n", n, shared.Path())
	for i, nd := range nodes {
		fmt.Fprintf(&w, "  node n%d:  %s\n", i+1, nd.URL())
	}
	first := nodes[0].URL()
	fmt.Fprintf(&w, "  chat:     open %[1]s/actor/chat/lobby, and the same room through another node\n"+
		"  app:      open %[1]s/app on any node (a front, a lobby and tables that call each other)\n"+
		"  counter:  curl -X POST %[1]s/actor/counter/mine (any node's URL: one node runs the room)\n"+
		"  cluster:  go run ./cmd/wasmkeep cluster status --server %[1]s\n"+
		"Rooms hibernate after %[2]s idle; Ctrl-C stops every node cleanly.\n\n", first, c.Duration("idle-timeout"))
	io.WriteString(c.App.Writer, w.String())

	var fenced error
	select {
	case <-ctx.Done():
	case name := <-lost:
		fenced = cli.Exit("wasmkeep: node "+name+" of the demo was fenced by the cluster; stopping the demo", 1)
	}
	stop()
	cfg.Logger.Info("stopping every node: hibernating rooms, then closing sockets with 1012")
	return errors.Join(stopAll(), fenced)
}

// demoJoinWait bounds the wait for a demo node to join: a node restarted
// after a crash on the same --data waits until its earlier process's
// lease has been silent for its lease time and a fifth, plus a renewal
// or two.
func demoJoinWait(ttl time.Duration) time.Duration { return 3 * ttl }

// readyPoll is how often waitReady asks.
const readyPoll = 20 * time.Millisecond

// waitReady waits until GET base/readyz answers 200, and says why not if
// it does not within the wait or ctx ends first.
func waitReady(ctx context.Context, base string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	why := "no answer"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		switch {
		case err == nil:
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			why = strings.TrimSpace(string(body))
		case ctx.Err() == nil: // the end of the wait is no reason
			why = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s/readyz after %v: %s", base, within, why)
		case <-tick.C:
		}
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
// that started this one ends, so that the demo (and dev) stops cleanly when started
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
					log.Info("the process that started this one has ended (go run was stopped)", "parent_pid", parent)
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}
