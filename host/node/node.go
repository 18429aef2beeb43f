// Package node assembles one wasmkeep node from its parts (store, engine,
// class registry, rooms, sockets, HTTP surface), starts it and stops it
// cleanly. The CLI and the end-to-end tests both start nodes through it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/alarms"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/fetch"
	"github.com/wasmkeep/wasmkeep/host/fronts"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/secrets"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/clock"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// Config is everything a node needs. A zero field means its Default*
// constant, of this package or of the package it configures (documented in
// docs/configuration.md; internal/limits has the convention).
type Config struct {
	// DataDir holds the local bucket and the compilation cache
	// (DefaultDataDir). A node that keeps its bucket there holds
	// the directory while it runs (HoldDataDir): a second node on it is
	// refused with a *store.InUseError naming the first.
	DataDir string
	// Hold is DataDir's hold if the caller took it (HoldDataDir) before
	// Start, to be refused before work of its own there: the demo builds
	// its classes into DataDir first. The node releases it when it stops,
	// or when Start fails.
	Hold *store.DirHold
	// Listen is the HTTP address (DefaultListen; port 0 picks one).
	Listen string
	// AdminListen, if set, is the address of a listener of its own for the
	// admin API, the dashboard, /metrics and pprof; Listen then serves
	// rooms, /healthz and /readyz only.
	AdminListen string
	// Bucket overrides the local directory store (an S3 bucket, or tests).
	Bucket store.Bucket
	// ProbeBucket runs store.Probe on the bucket before anything else is
	// done with it, and refuses to start on a bucket that fails it within
	// ProbeTimeout: a store that ignores conditional writes would let two
	// writers both win.
	ProbeBucket bool
	// Placement overrides single-node placement (tests).
	Placement rooms.Placement
	// Cluster, if set, makes the node a member of a cluster over its
	// bucket: its membership is its placement.
	Cluster *ClusterConfig

	// Clock is the one clock of the node's engine, rooms and sockets
	// (default clock.Real()); it overrides theirs. Tests give a manual one.
	Clock clock.Clock

	// Manifests is how a new bucket keeps rooms' manifests
	// (store.ManifestsOverwrite, or store.ManifestsNumbered for stores
	// that take one write a second to a key); "" takes an existing
	// bucket's, or overwrite for a new one. A node told otherwise than
	// its bucket keeps them does not start.
	Manifests string

	// Secrets are the keys the app's secrets are sealed and opened with
	// (none: the node runs while the app has no secrets).
	Secrets secrets.Keys

	// Fetch is where and how rooms and fronts may fetch from other
	// services (none allowed: every fetch is refused, saying so).
	Fetch fetch.Config

	Engine  engine.Config
	Rooms   rooms.Config
	Fronts  fronts.Config
	Sockets socket.Config
	Server  server.Config
	// MaxModuleBytes caps an uploaded module
	// (classes.DefaultMaxModuleBytes).
	MaxModuleBytes int
	// StopTimeout bounds a clean stop (DefaultStopTimeout).
	StopTimeout time.Duration
	// ReclaimCloses is how many room instances must close (hibernations,
	// drops) before the node, once their closes pause, collects garbage
	// and returns the freed memory to the OS (DefaultReclaimCloses;
	// limits.Off: never, leaving it to the Go runtime's own pacing).
	ReclaimCloses int

	Logger *slog.Logger
}

// ClusterConfig makes a node a member of a cluster.
type ClusterConfig struct {
	// Member builds the membership once the bucket is open and the rooms
	// listener bound. package clusternode builds one.
	Member func(ctx context.Context, env MemberEnv) (Member, error)
	// Secret authenticates node-to-node requests. Required.
	Secret []byte
}

// MemberEnv is what a node gives the builder of its cluster membership.
type MemberEnv struct {
	// Bucket is the node's (metered) bucket.
	Bucket store.Bucket
	// Addr is the rooms listener's bound address.
	Addr    string
	Metrics *metrics.Set
	Clock   clock.Clock
	Logger  *slog.Logger
}

// Member is a node's membership of a cluster: the placement of its rooms,
// what its HTTP surface asks of the cluster, and a life the node starts
// and stops.
type Member interface {
	rooms.Placement
	server.ClusterMember
	// Name is the node's name in the cluster.
	Name() string
	// Join starts the membership's duties for the node's rooms.
	Join(*rooms.Manager)
	// Leave releases every hold and the lease: a clean stop, once the
	// rooms are hibernated.
	Leave(context.Context)
	// Lost is closed when the membership ended by itself (the node was
	// fenced): the process must exit.
	Lost() <-chan struct{}
	// Calls routes the calls the node's rooms make to their rooms,
	// wherever in the cluster they run.
	Calls() calls.Router
	// Alarms delivers the alarms of the node's rooms, wherever in the
	// cluster they run; one of the membership's duties runs it.
	Alarms() *alarms.Duty
}

// Defaults of Config.
const (
	// DefaultDataDir is relative: a node tried out in a checkout keeps
	// its state beside it.
	DefaultDataDir = "./wasmkeep-data"
	// DefaultListen answers this machine only: opening rooms to the
	// network is a choice.
	DefaultListen = "127.0.0.1:8080"
	// DefaultStopTimeout gives a clean stop time to hibernate many rooms,
	// and ends one that a store which no longer answers would hold up.
	DefaultStopTimeout = 30 * time.Second
)

func (c Config) withDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	limits.Default(&c.MaxModuleBytes, classes.DefaultMaxModuleBytes)
	limits.Default(&c.StopTimeout, DefaultStopTimeout)
	limits.DefaultOrOff(&c.ReclaimCloses, DefaultReclaimCloses)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// ProbeTimeout bounds the store's conformance probe at start, so that a
// node on a store that hangs exits within it rather than waiting.
const ProbeTimeout = 8 * time.Second

// idleTimeout is how long the HTTP server keeps an idle kept-alive
// connection (net/http's default is forever).
const idleTimeout = 2 * time.Minute

// Node is a running node.
type Node struct {
	cfg     Config
	Metrics *metrics.Set
	// Secrets are the app's secrets, opened with Config.Secrets.
	Secrets *secrets.Store
	Engine  *engine.Engine
	Classes *classes.Registry
	Rooms   *rooms.Manager
	Fronts  *fronts.Fronts
	Hub     *socket.Hub
	Bucket  store.Bucket

	listener net.Listener
	http     *http.Server
	// The admin listener and its server, with Config.AdminListen.
	adminListener net.Listener
	adminHTTP     *http.Server
	served        chan error // one value per server
	closers       []func() error
	stopOnce      sync.Once
	stopErr       error
	// leaveEngine: a stop found room workers still running after its
	// deadline; closing the engine under them would unmap their memory.
	leaveEngine bool
	// member is the node's cluster membership, with Config.Cluster.
	member Member
	// alarms delivers the alarms of the node's rooms (package alarms): the
	// node's own outside a cluster, the member's in one; stopAlarms stops
	// the node's own and waits for its deliveries.
	alarms     *alarms.Duty
	stopAlarms func()
}

// Alarms is the duty that delivers the alarms of the node's rooms.
func (n *Node) Alarms() *alarms.Duty { return n.alarms }

// Member is the node's cluster membership, or nil outside a cluster.
func (n *Node) Member() Member { return n.member }

// Lost is closed when the node's cluster membership ended by itself (it
// was fenced): the process must exit. Outside a cluster it never is.
func (n *Node) Lost() <-chan struct{} {
	if n.member == nil {
		return nil
	}
	return n.member.Lost()
}

// Start builds a node and starts serving.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg = cfg.withDefaults()
	n := &Node{cfg: cfg, Metrics: metrics.NewSet(), served: make(chan error, 2)}
	defer func() {
		if err != nil {
			n.closeAll()
		}
	}()

	// First of all: a node that is refused its data directory must not
	// have touched anything in it.
	hold := cfg.Hold
	if hold == nil && cfg.Bucket == nil {
		if hold, err = HoldDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	if hold != nil {
		n.closers = append(n.closers, hold.Release)
	}

	n.Bucket = cfg.Bucket
	if n.Bucket == nil {
		// The node holds its data directory (above), so its store is
		// its own: a journal makes each durable write an append.
		dir, err := store.OpenDirWith(filepath.Join(cfg.DataDir, "store"), store.DirOptions{Journal: true})
		if err != nil {
			return nil, fmt.Errorf("opening the data directory: %w", err)
		}
		n.Bucket = dir
		n.closers = append(n.closers, dir.Close)
		if js, _ := dir.Journal(); js.Replayed > 0 {
			cfg.Logger.Warn("the store's journal held changes that a crash left; they were written to their objects before the start", "changes", js.Replayed)
		}
		journal := func(f func(store.JournalStats) float64) func() float64 {
			return func() float64 { js, _ := dir.Journal(); return f(js) }
		}
		n.Metrics.NewGauge(`wasmkeep_store_journal_bytes`, journal(func(js store.JournalStats) float64 { return float64(js.Bytes) }))
		n.Metrics.NewGauge(`wasmkeep_store_journal_pending`, journal(func(js store.JournalStats) float64 { return float64(js.Pending) }))
		n.Metrics.NewGauge(`wasmkeep_store_journal_checkpoints`, journal(func(js store.JournalStats) float64 { return float64(js.Checkpoints) }))
	}
	n.Bucket = store.Metered(n.Bucket, n.Metrics)
	if cfg.ProbeBucket {
		pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		err := store.Probe(pctx, n.Bucket)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("the store is not safe to run on: %w", err)
		}
	}
	manifests, err := store.CheckFormat(ctx, n.Bucket, cfg.Manifests)
	if err != nil {
		return nil, err
	}

	n.Secrets = secrets.New(n.Bucket, cfg.Secrets)
	gate := &secretsGate{store: n.Secrets, log: cfg.Logger}

	ecfg := cfg.Engine
	ecfg.Secrets = engineSecrets{n.Secrets}
	if ecfg.Fetcher, err = n.newFetcher(cfg.Fetch); err != nil {
		return nil, err
	}
	if ecfg.CacheDir == "" {
		ecfg.CacheDir = filepath.Join(cfg.DataDir, "cache")
	}
	ecfg.Logger, ecfg.Clock = cfg.Logger, cfg.Clock
	n.Engine, err = engine.New(ctx, ecfg)
	if err != nil {
		return nil, err
	}
	n.closers = append(n.closers, func() error {
		if n.leaveEngine {
			return nil
		}
		return n.Engine.Close(context.Background())
	})
	n.Classes = classes.New(n.Bucket, n.Engine, cfg.MaxModuleBytes)
	n.Metrics.NewGauge(`wasmkeep_classes_compiled`, func() float64 { return float64(n.Engine.Stats().Classes) })
	n.Metrics.NewGauge(`wasmkeep_spare_memories`, func() float64 { return float64(n.Engine.Stats().Spares) })

	sockets := cfg.Sockets
	sockets.Clock = cfg.Clock
	n.Hub = socket.NewHub(sockets, n.Metrics)
	n.closers = append(n.closers, func() error { n.Hub.Close(); return nil })

	// The listener is bound before the rooms exist: a cluster member
	// advertises its address in its lease.
	n.listener, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	place := cfg.Placement
	if cfg.Cluster != nil {
		if place != nil {
			return nil, errors.New("node: a cluster member has its own placement")
		}
		if len(cfg.Cluster.Secret) == 0 {
			return nil, errors.New("node: a cluster member needs the cluster secret (--cluster-secret)")
		}
		if n.member, err = cfg.Cluster.Member(ctx, MemberEnv{Bucket: n.Bucket, Addr: n.listener.Addr().String(),
			Metrics: n.Metrics, Clock: cfg.Clock, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("joining the cluster: %w", err)
		}
		place = n.member
	}
	if place == nil {
		// Generations grow from a counter in the bucket; the wall clock
		// only seeds it the first time (older versions used it alone).
		if place, err = rooms.NewStoredLocal(ctx, n.Bucket, uint64(cfg.Clock.Wall().UnixMicro())); err != nil {
			return nil, err
		}
	}
	rcfg := cfg.Rooms
	rcfg.NumberedManifests = manifests == store.ManifestsNumbered
	rcfg.Logger, rcfg.Metrics, rcfg.Framer, rcfg.Clock = cfg.Logger, n.Metrics, server.Framer(n.Hub), cfg.Clock
	rcfg.Refuse = gate.Problem
	if n.member != nil {
		gate.member = n.member
	}
	if n.member != nil {
		rcfg.Calls = n.member.Calls()
	}
	var deliveries sync.WaitGroup
	actx, stopAlarms := context.WithCancel(context.Background())
	n.closers = append(n.closers, func() error { stopAlarms(); return nil })
	if n.member != nil {
		n.alarms = n.member.Alarms()
	} else {
		// Deliveries are routed as the rooms' calls are: the manager's
		// router, once the manager exists.
		if n.alarms, err = alarms.NewDuty(alarms.Config{Bucket: n.Bucket, Alone: true, Logger: cfg.Logger,
			Route: func(ctx context.Context, c *calls.Call) calls.Result { return n.Rooms.Router().Route(ctx, c) },
			Now:   cfg.Clock.Now, Wall: func() int64 { return cfg.Clock.Wall().UnixMilli() },
			Go: func(_ string, f func(context.Context)) {
				deliveries.Go(func() { f(actx) })
			},
			Observer: rooms.AlarmMetrics(n.Metrics, func() int { return n.alarms.Pending() }),
		}); err != nil {
			return nil, err
		}
	}
	rcfg.Alarms = n.alarms
	if rcfg.ImageDir == "" {
		// Next to the compilation cache: the node's own disk, whatever
		// its store; only this node uses it (host/images).
		rcfg.ImageDir = filepath.Join(cfg.DataDir, "cache", "images")
	}
	n.Rooms, err = rooms.NewManager(ctx, rcfg, rooms.EngineClasses(n.Classes), n.Bucket, place)
	if err != nil {
		return nil, err
	}
	n.startReclaimer() // it watches the rooms' kept instances too

	fcfg := cfg.Fronts
	fcfg.Logger, fcfg.Clock = cfg.Logger, cfg.Clock
	n.Fronts = fronts.New(fcfg, n.Classes, n.Rooms, n.Metrics)
	n.closers = append(n.closers, func() error { n.Fronts.Close(); return nil })

	scfg := cfg.Server
	scfg.Logger, scfg.Fronts = cfg.Logger, n.Fronts
	scfg.Secrets, scfg.SecretsProblem = n.Secrets, gate.Problem
	if n.member != nil {
		n.member.Join(n.Rooms)
		n.closers = append(n.closers, func() error { n.member.Leave(context.Background()); return nil })
		scfg.Cluster = &server.Cluster{Node: n.member.Name(), Secret: cfg.Cluster.Secret, Member: n.member}
	}
	// Before anything is served, and once a member has joined (its drain
	// is a duty of the membership): a node that cannot open the app's
	// secrets takes no room from the start.
	gctx, stopGate := context.WithCancel(context.Background())
	n.closers = append(n.closers, func() error { stopGate(); return nil })
	gate.check(gctx, n.Rooms)
	go gate.run(gctx, cfg.Clock, n.Rooms)
	if n.member == nil {
		// A cluster member runs its alarm duty with its others.
		alarmsDone := make(chan struct{})
		go func() {
			defer close(alarmsDone)
			runDuty(actx, cfg.Clock, n.alarms.Pass)
		}()
		n.stopAlarms = sync.OnceFunc(func() { stopAlarms(); <-alarmsDone; deliveries.Wait() })
		n.closers = append(n.closers, func() error { n.stopAlarms(); return nil })
	}
	scfg.AdminAddrs = []string{cfg.Listen, n.listener.Addr().String()}
	if cfg.AdminListen != "" {
		if n.adminListener, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			return nil, fmt.Errorf("the admin listener: %w", err)
		}
		scfg.AdminAddrs = []string{cfg.AdminListen, n.adminListener.Addr().String()}
		scfg.SeparateAdmin = true
	}
	srv := server.New(scfg, n.Classes, n.Rooms, n.Hub, n.Metrics)
	n.closers = append(n.closers, func() error { srv.Close(); return nil })
	n.http = n.httpServer(srv)
	go func() { n.served <- n.http.Serve(n.listener) }()
	if n.adminListener != nil {
		n.adminHTTP = n.httpServer(srv.AdminHandler())
		go func() { n.served <- n.adminHTTP.Serve(n.adminListener) }()
		cfg.Logger.Info("wasmkeep admin API serving", "addr", n.AdminAddr())
	}
	attrs := []any{"addr", n.Addr(), "data", cfg.DataDir}
	if named, ok := cfg.Bucket.(fmt.Stringer); ok {
		attrs = append(attrs, "store", named.String())
	}
	cfg.Logger.Info("wasmkeep node serving", attrs...)
	return n, nil
}

// newFetcher makes the fetcher of the node's rooms and fronts, counting
// their fetches by outcome and timing them. It always makes one, even
// with nothing allowed: a guest's fetch is then refused with the reason
// (--fetch-allow), not answered "unsupported".
func (n *Node) newFetcher(cfg fetch.Config) (*fetch.Fetcher, error) {
	counts := map[string]*metrics.Counter{}
	for _, o := range fetch.Outcomes {
		counts[o] = n.Metrics.NewCounter(`wasmkeep_fetches_total{outcome="` + o + `"}`)
	}
	took := n.Metrics.NewHistogram(`wasmkeep_fetch_seconds`)
	cfg.Observe = func(outcome string, d time.Duration) {
		counts[outcome].Inc()
		took.Update(d.Seconds())
	}
	return fetch.New(cfg)
}

// httpServer makes the http.Server of one of the node's listeners.
func (n *Node) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler: h,
		// A client has the handshake timeout to send its request line and
		// headers (a slow one is cut then, before it reaches a room or takes
		// a socket slot), and a kept-alive connection may idle for
		// idleTimeout between requests.
		ReadHeaderTimeout: n.Hub.Config().HandshakeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(n.cfg.Logger.Handler(), slog.LevelWarn),
	}
}

// HoldDataDir takes the exclusive hold on a node's data directory for
// this process (see store.HoldDir), creating the directory if needed. It
// fails at once, with a *store.InUseError naming the holder, if another
// node (or process) holds it. Start takes the hold itself; take it first
// only to be refused before doing work of your own in the directory, and
// pass it in Config.Hold.
func HoldDataDir(dir string) (*store.DirHold, error) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return store.HoldDir(dir, store.Holder{PID: os.Getpid(), Host: host, Started: time.Now()})
}

// Addr is the address the node listens on.
func (n *Node) Addr() string { return n.listener.Addr().String() }

// URL is the node's base URL.
func (n *Node) URL() string { return "http://" + n.Addr() }

// AdminAddr is the address the node serves its admin API on: its admin
// listener's with Config.AdminListen, else Addr.
func (n *Node) AdminAddr() string {
	if n.adminListener != nil {
		return n.adminListener.Addr().String()
	}
	return n.Addr()
}

// AdminURL is the base URL of the node's admin API.
func (n *Node) AdminURL() string { return "http://" + n.AdminAddr() }

// Stop stops the node cleanly: it refuses new work, hibernates every
// resident room, then closes every socket with 1012 (service restart) so
// clients reconnect, and finally stops listening. After a restart on the
// same data directory every room's state is back.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() { n.stopErr = n.stop(ctx) })
	return n.stopErr
}

func (n *Node) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.StopTimeout)
	defer cancel()
	start := time.Now()
	var errs []error
	// What the alarm duty has not delivered, the next process (or
	// another node) finds in the index.
	n.alarms.Stop()
	if n.stopAlarms != nil {
		n.stopAlarms()
	}
	if err := n.Rooms.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	resident := time.Since(start)
	if err := n.Hub.CloseAll(ctx, abi.CloseServiceRestart, "server restarting"); err != nil {
		errs = append(errs, err)
	}
	if n.member != nil {
		// Every room hibernated: its release was sent; the lease goes
		// last, which frees whatever release did not land.
		n.member.Leave(ctx)
	}
	servers := []*http.Server{n.http}
	if n.adminHTTP != nil {
		servers = append(servers, n.adminHTTP)
	}
	for _, s := range servers {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for range servers {
		if err := <-n.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	// The sockets' closes start workers that record them; the engine
	// (and the linear memories it maps) goes only once none runs.
	if err := n.Rooms.Close(ctx); err != nil {
		errs = append(errs, err)
		n.cfg.Logger.Error("stopping: rooms still running; leaving the engine open", "err", err)
		n.leaveEngine = true
	}
	n.closeAll()
	n.cfg.Logger.Info("wasmkeep node stopped", "hibernate_all", resident.Round(time.Millisecond), "total", time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}

func (n *Node) closeAll() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		_ = n.closers[i]()
	}
	n.closers = nil
	if n.listener != nil && n.http == nil {
		n.listener.Close()
	}
	if n.adminListener != nil && n.adminHTTP == nil {
		n.adminListener.Close()
	}
}

// runDuty runs pass in a loop until ctx ends, waiting on clk for as long
// as each pass asks.
func runDuty(ctx context.Context, clk clock.Clock, pass func(context.Context) time.Duration) {
	t := clk.NewTimer(time.Hour)
	defer t.Stop()
	for ctx.Err() == nil {
		t.Reset(pass(ctx))
		select {
		case <-ctx.Done():
		case <-t.C():
		}
	}
}
