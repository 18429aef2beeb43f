package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/fetch"
	"github.com/wasmkeep/wasmkeep/host/fronts"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// env names a flag's environment variable: WASMKEEP_ and the flag's name in
// capitals with dashes as underscores.
func env(flag string) []string {
	return []string{"WASMKEEP_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

func serveFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "data", Value: node.DefaultDataDir, Usage: "directory for the local store and compile cache", EnvVars: env("data")},
		&cli.StringFlag{Name: "store", Usage: "keep classes and rooms in an S3 bucket, s3://BUCKET[/PREFIX], instead of the data directory (which keeps the compile cache)", EnvVars: env("store")},
		&cli.BoolFlag{Name: "store-probe", Value: true, Usage: "check at start that the S3 store honours conditional writes (create, compare-and-swap, concurrent creates) and refuse it otherwise; false skips the check, for one node only", EnvVars: env("store-probe")},
		&cli.StringFlag{Name: "s3-endpoint", Usage: "the S3 server's URL (default: AWS_ENDPOINT_URL, the shared config, else AWS); an IP address or localhost implies path-style addressing", EnvVars: env("s3-endpoint")},
		&cli.StringFlag{Name: "s3-region", Usage: "the bucket's region (default: AWS_REGION, the shared config, else us-east-1)", EnvVars: env("s3-region")},
		&cli.BoolFlag{Name: "s3-path-style", Usage: "address the bucket in the URL's path rather than its host name", EnvVars: env("s3-path-style")},
		&cli.StringFlag{Name: "s3-profile", Usage: "the shared config profile for the S3 credentials and settings (default: AWS_PROFILE)", EnvVars: env("s3-profile")},
		&cli.StringFlag{Name: "listen", Value: node.DefaultListen, Usage: "HTTP address for rooms, and for the admin API, dashboard, metrics and pprof unless --admin-listen", EnvVars: env("listen")},
		&cli.StringFlag{Name: "admin-listen", Usage: "HTTP address of a listener of its own for the admin API, dashboard, metrics and pprof (--listen then serves rooms only)", EnvVars: env("admin-listen")},
		&cli.StringFlag{Name: "admin-token", Usage: "bearer token that opens the admin API to clients off loopback", EnvVars: env("admin-token")},
		&cli.StringSliceFlag{Name: "admin-hosts", Usage: "names clients reach the admin API by, besides its listen address's (comma-separated); a request for another name is refused", EnvVars: env("admin-hosts")},
		&cli.DurationFlag{Name: "idle-timeout", Value: rooms.DefaultIdleTimeout, Usage: "hibernate a room after this long without events", EnvVars: env("idle-timeout")},
		&cli.IntFlag{Name: "max-resident", Value: rooms.DefaultMaxResident, Usage: "rooms kept in memory; a wake past it hibernates the least recently used idle room and waits for it", EnvVars: env("max-resident")},
		&cli.DurationFlag{Name: "wake-wait", Value: rooms.DefaultWakeWait, Usage: "time a wake may wait for a place under --max-resident before its event is refused (HTTP 503, WebSocket close 1013)", EnvVars: env("wake-wait")},
		&cli.DurationFlag{Name: "event-timeout", Value: flagLimit(engine.DefaultEventTimeout), Usage: "time one event may run in a room before the room is stopped and rolled back (0: no limit, for trusted guests; the check costs a few ns per loop iteration, docs/PERFORMANCE.md)", EnvVars: env("event-timeout")},
		&cli.StringFlag{Name: "manifests", Usage: "how a new bucket keeps rooms' manifests: overwrite (one object a room, replaced at each commit) or numbered (a new object a commit, for stores that take one write a second to a key: Cloudflare R2, Google Cloud Storage); default: the bucket's, overwrite for a new one", EnvVars: env("manifests")},
		&cli.DurationFlag{Name: "commit-window", Usage: "least time between the starts of two writes of one room's state under per-event durability: the events in between share the next write, which bounds a busy room's store requests at the price of their answers' latency (default: 0 on the data directory, 100ms on S3; at most 10s)", EnvVars: env("commit-window")},
		&cli.DurationFlag{Name: "call-timeout", Value: rooms.DefaultCallTimeout, Usage: "time a room's call to another room waits for its answer (not counted toward --event-timeout)", EnvVars: env("call-timeout")},
		&cli.IntFlag{Name: "max-room-memory", Value: engine.DefaultMaxMemoryPages / engine.PagesPerMiB, Usage: "linear memory per room, in MiB", EnvVars: env("max-room-memory")},
		&cli.IntFlag{Name: "max-module-size", Value: classes.DefaultMaxModuleBytes, Usage: "largest module accepted at upload, in bytes", EnvVars: env("max-module-size")},
		&cli.Int64Flag{Name: "max-body", Value: server.DefaultMaxRequestBody, Usage: "largest HTTP request body sent to a room, in bytes", EnvVars: env("max-body")},
		&cli.DurationFlag{Name: "body-timeout", Value: server.DefaultBodyTimeout, Usage: "time an HTTP request body has to arrive whole after its headers (HTTP 408 past it)", EnvVars: env("body-timeout")},
		&cli.IntFlag{Name: "upload-min-rate", Value: server.DefaultUploadMinRate, Usage: "bytes per second an admin upload (class put, room import) must keep after its first --body-timeout", EnvVars: env("upload-min-rate")},
		&cli.IntFlag{Name: "max-bodies-per-ip", Value: server.DefaultMaxBodiesPerIP, Usage: "HTTP request bodies one client address may be sending at once (HTTP 429 past it)", EnvVars: env("max-bodies-per-ip")},
		&cli.IntFlag{Name: "max-event-output", Value: rooms.DefaultMaxEventOutput, Usage: "bytes one event's sends, broadcasts and pushes may hold until it returns (each counts its payload and 128 bytes); a call past it answers the guest \"too large\"", EnvVars: env("max-event-output")},
		&cli.IntFlag{Name: "max-response", Value: engine.DefaultMaxResponseBytes, Usage: "largest HTTP response a room may give, in bytes", EnvVars: env("max-response")},
		&cli.IntFlag{Name: "max-message", Value: socket.DefaultMaxMessage, Usage: "largest WebSocket message (and frame), in bytes", EnvVars: env("max-message")},
		&cli.IntFlag{Name: "max-sockets", Value: socket.DefaultMaxSockets, Usage: "open WebSockets per node", EnvVars: env("max-sockets")},
		&cli.IntFlag{Name: "max-sockets-per-ip", Value: flagLimit(socket.DefaultMaxSocketsPerIP), Usage: "open WebSockets per client address (an IPv6 /64 counts as one); 0: no limit", EnvVars: env("max-sockets-per-ip")},
		&cli.IntFlag{Name: "upgrade-rate-per-ip", Value: flagLimit(socket.DefaultUpgradeRatePerIP), Usage: "WebSocket upgrade attempts per second per client address, after the burst; 0: no limit", EnvVars: env("upgrade-rate-per-ip")},
		&cli.IntFlag{Name: "upgrade-burst-per-ip", Value: socket.DefaultUpgradeBurstPerIP, Usage: "upgrade attempts a client address may make at once under --upgrade-rate-per-ip", EnvVars: env("upgrade-burst-per-ip")},
		&cli.StringSliceFlag{Name: "allowed-origins", Usage: "origins (scheme://host[:port], a host may start with *.; * for any) whose pages may open WebSockets, besides the node's own (comma-separated)", EnvVars: env("allowed-origins")},
		&cli.BoolFlag{Name: "trust-forwarded-for", Usage: "count the per-address limits under the last X-Forwarded-For address (only behind a proxy)", EnvVars: env("trust-forwarded-for")},
		&cli.DurationFlag{Name: "handshake-timeout", Value: socket.DefaultHandshakeTimeout, Usage: "time a client has to send its request headers, and to take a WebSocket handshake's answer", EnvVars: env("handshake-timeout")},
		&cli.IntFlag{Name: "socket-message-rate", Value: flagLimit(socket.DefaultMessageRate), Usage: "messages per second a WebSocket may send, after the burst; more are dropped (0: no limit)", EnvVars: env("socket-message-rate")},
		&cli.IntFlag{Name: "socket-message-burst", Value: socket.DefaultMessageBurst, Usage: "messages a WebSocket may send at once under --socket-message-rate", EnvVars: env("socket-message-burst")},
		&cli.IntFlag{Name: "socket-queue-frames", Value: socket.DefaultOutboundFrames, Usage: "frames waiting to be written to one WebSocket; at it the node stops reading that client until half are written", EnvVars: env("socket-queue-frames")},
		&cli.IntFlag{Name: "socket-queue-bytes", Value: socket.DefaultOutboundBytes, Usage: "bytes waiting to be written to one WebSocket; at it the node stops reading that client until half are written (4 times it evicts the client)", EnvVars: env("socket-queue-bytes")},
		&cli.DurationFlag{Name: "socket-slow-timeout", Value: socket.DefaultSlowTimeout, Usage: "time a WebSocket client whose queue is full may take nothing before it is evicted as a slow reader", EnvVars: env("socket-slow-timeout")},
		&cli.StringFlag{Name: "socket-reader", Value: socket.ReadAuto.String(), Usage: "how idle WebSockets wait for their next frame: epoll (one epoll instance for all, no goroutine per idle socket; Linux), goroutine (a goroutine per socket), or auto (epoll where available)", EnvVars: env("socket-reader")},
		&cli.DurationFlag{Name: "socket-write-timeout", Value: socket.DefaultWriteTimeout, Usage: "time one write to a WebSocket client may take before the client is evicted as a slow reader", EnvVars: env("socket-write-timeout")},
		&cli.IntFlag{Name: "mailbox-size", Value: rooms.DefaultMailboxSize, Usage: "pending events per room", EnvVars: env("mailbox-size")},
		&cli.IntFlag{Name: "front-instances", Value: fronts.DefaultInstances, Usage: "instances of each front (a class uploaded with --front) a node runs at most, each serving one request at a time", EnvVars: env("front-instances")},
		&cli.IntFlag{Name: "front-queue", Value: fronts.DefaultQueue, Usage: "requests of one front that may wait for an instance; the next is answered HTTP 503", EnvVars: env("front-queue")},
		&cli.StringSliceFlag{Name: "fetch-allow", Usage: "hosts rooms and fronts may fetch from (repeat it, or comma-separated): a name (api.example.com, *.example.com for its subdomains, either with :port) or an address or CIDR prefix, the only way to allow this machine's or a private network's addresses; none by default: every fetch is refused", EnvVars: env("fetch-allow")},
		&cli.DurationFlag{Name: "fetch-timeout", Value: fetch.DefaultTimeout, Usage: "time a fetch, redirects included, has to get its whole answer (not counted toward --event-timeout)", EnvVars: env("fetch-timeout")},
		&cli.IntFlag{Name: "fetch-max-request", Value: fetch.DefaultMaxRequest, Usage: "largest body a room may send in a fetch, in bytes", EnvVars: env("fetch-max-request")},
		&cli.IntFlag{Name: "fetch-max-response", Value: fetch.DefaultMaxResponse, Usage: "largest body a fetch may bring back, in bytes; a larger answer is refused \"too large\"", EnvVars: env("fetch-max-response")},
		&cli.IntFlag{Name: "fetch-per-room", Value: fetch.DefaultPerRoom, Usage: "fetches one room (or one front) may have in flight; the next is refused at once \"too many\"", EnvVars: env("fetch-per-room")},
		&cli.IntFlag{Name: "fetch-per-node", Value: fetch.DefaultPerNode, Usage: "fetches the node's rooms and fronts may have in flight in all; the next is refused at once \"too many\"", EnvVars: env("fetch-per-node")},
		&cli.IntFlag{Name: "image-cache", Value: rooms.DefaultImageBytes / mib, Usage: "MiB of memory images of rooms hibernated here, kept in files under --data (cache/images) so that a room wakes here by mapping its memory rather than decoding its snapshot (0: none)", EnvVars: env("image-cache")},
		&cli.IntFlag{Name: "image-files", Value: rooms.DefaultImageFiles, Usage: "memory images kept at most, each a file under --data", EnvVars: env("image-files")},
		&cli.IntFlag{Name: "compile-cache", Value: engine.DefaultCacheBytes / mib, Usage: "MiB of machine code compiled from class modules, kept under --data (cache/) so that a restart does not compile again; past it a start removes the least recently used (0: none, every start compiles)", EnvVars: env("compile-cache")},
		&cli.IntFlag{Name: "pool-size", Value: flagLimit(engine.DefaultPoolSize), Usage: "blank instances kept ready per class to speed up wakes (0 disables)", EnvVars: env("pool-size")},
		&cli.BoolFlag{Name: "interpreter", Usage: "run guests with wazero's interpreter instead of its compiler", EnvVars: env("interpreter")},
		&cli.StringFlag{Name: "log-level", Value: defaultLogLevel, Usage: "debug, info, warn or error", EnvVars: env("log-level")},
		&cli.StringFlag{Name: "log-format", Value: defaultLogFormat, Usage: "text or json", EnvVars: env("log-format")},
	}, append(secretFlags(), clusterFlags()...)...)
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run a node on a local data directory",
		Flags: serveFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := nodeConfig(c)
			if err != nil {
				return err
			}
			return run(c.Context, cfg, nil)
		},
	}
}

// nodeConfig reads the node's flags. A value it refuses is wrong usage:
// exit code 2, before anything is done.
func nodeConfig(c *cli.Context) (node.Config, error) {
	logger, err := newLogger(c.String("log-level"), c.String("log-format"))
	if err == nil {
		err = checkLimits(c)
	}
	var reader socket.ReadMode
	if err == nil {
		if reader, err = socket.ParseReadMode(c.String("socket-reader")); err != nil {
			err = fmt.Errorf("--socket-reader must be auto, goroutine or epoll, not %q", c.String("socket-reader"))
		}
	}
	if err == nil {
		if err = server.ValidOrigins(c.StringSlice("allowed-origins")); err != nil {
			err = fmt.Errorf("--allowed-origins: %w", err)
		}
	}
	if err == nil {
		if _, err = fetch.New(fetch.Config{Allow: c.StringSlice("fetch-allow")}); err != nil {
			err = fmt.Errorf("--fetch-allow: %w", err)
		}
	}
	if err != nil {
		return node.Config{}, cli.Exit("wasmkeep: "+err.Error(), 2)
	}
	bucket, err := s3Store(c, logger)
	if err != nil {
		return node.Config{}, cli.Exit("wasmkeep: "+err.Error(), 2)
	}
	mem := c.Int("max-room-memory")
	cfg := node.Config{
		Bucket:      bucket,
		ProbeBucket: bucket != nil && c.Bool("store-probe"),
		DataDir:     c.String("data"),
		Listen:      c.String("listen"),
		AdminListen: c.String("admin-listen"),
		Engine: engine.Config{
			MaxMemoryPages:   uint32(mem * engine.PagesPerMiB),
			EventTimeout:     limitOf(c.Duration("event-timeout")),
			MaxResponseBytes: c.Int("max-response"),
			PoolSize:         limitOf(c.Int("pool-size")),
			CacheBytes:       limitOf(int64(c.Int("compile-cache")) * mib),
			Interpreter:      c.Bool("interpreter"),
		},
		Rooms: rooms.Config{
			IdleTimeout:    c.Duration("idle-timeout"),
			MaxResident:    c.Int("max-resident"),
			WakeWait:       c.Duration("wake-wait"),
			MailboxSize:    c.Int("mailbox-size"),
			ImageBytes:     limitOf(int64(c.Int("image-cache")) * mib),
			ImageFiles:     c.Int("image-files"),
			MaxEventOutput: c.Int("max-event-output"),
			CallTimeout:    c.Duration("call-timeout"),
			CommitWindow:   commitWindow(c, bucket != nil),
		},
		Fetch: fetch.Config{
			Allow:       c.StringSlice("fetch-allow"),
			Timeout:     c.Duration("fetch-timeout"),
			MaxRequest:  c.Int("fetch-max-request"),
			MaxResponse: c.Int("fetch-max-response"),
			PerRoom:     c.Int("fetch-per-room"),
			PerNode:     c.Int("fetch-per-node"),
		},
		Fronts: fronts.Config{
			Instances: c.Int("front-instances"),
			Queue:     c.Int("front-queue"),
		},
		Sockets: socket.Config{
			MaxMessage:        c.Int("max-message"),
			MaxSockets:        c.Int("max-sockets"),
			MaxSocketsPerIP:   limitOf(c.Int("max-sockets-per-ip")),
			UpgradeRatePerIP:  limitOf(c.Int("upgrade-rate-per-ip")),
			UpgradeBurstPerIP: c.Int("upgrade-burst-per-ip"),
			TrustForwardedFor: c.Bool("trust-forwarded-for"),
			HandshakeTimeout:  c.Duration("handshake-timeout"),
			MessageRate:       limitOf(c.Int("socket-message-rate")),
			MessageBurst:      c.Int("socket-message-burst"),
			OutboundFrames:    c.Int("socket-queue-frames"),
			OutboundBytes:     c.Int("socket-queue-bytes"),
			SlowTimeout:       c.Duration("socket-slow-timeout"),
			WriteTimeout:      c.Duration("socket-write-timeout"),
			Reader:            reader,
		},
		Server: server.Config{
			AdminToken:     c.String("admin-token"),
			AdminHosts:     c.StringSlice("admin-hosts"),
			MaxRequestBody: c.Int64("max-body"),
			BodyTimeout:    c.Duration("body-timeout"),
			UploadMinRate:  c.Int("upload-min-rate"),
			MaxBodiesPerIP: c.Int("max-bodies-per-ip"),
			AllowedOrigins: c.StringSlice("allowed-origins"),
		},
		MaxModuleBytes: c.Int("max-module-size"),
		Manifests:      c.String("manifests"),
		Logger:         logger,
	}
	if cfg.Secrets, err = secretKeys(c); err != nil {
		return node.Config{}, err
	}
	if err := clusterConfig(c, &cfg); err != nil {
		return node.Config{}, cli.Exit("wasmkeep: "+err.Error(), 2)
	}
	return cfg, nil
}

// commitWindow is --commit-window, or the store's default: none on the
// data directory, where a write costs nothing but its fsyncs, and
// rooms.DefaultS3CommitWindow on S3, where each write is billed.
func commitWindow(c *cli.Context, s3 bool) time.Duration {
	if c.IsSet("commit-window") || !s3 {
		return c.Duration("commit-window")
	}
	return rooms.DefaultS3CommitWindow
}

// The command line's own defaults, which no package has.
const (
	// maxCommitWindow bounds --commit-window: past it the answers of a
	// durable room would wait longer than clients wait for them.
	maxCommitWindow = 10 * time.Second
	// mib is the unit of the flags given in MiB.
	mib = 1 << 20
	// maxCacheMiB keeps --image-cache's and --compile-cache's bytes well
	// inside an int64.
	maxCacheMiB = 1 << 30

	defaultLogLevel  = "info"
	defaultLogFormat = "text"
)

// flagLimit is how the command line shows the default of a limit that 0
// turns off: the packages say "off" with limits.Off, the flags with 0.
func flagLimit[T limits.Signed](def T) T {
	if limits.IsOff(def) {
		return 0
	}
	return def
}

// limitOf maps a flag that 0 turns off to its package's field: 0 is
// limits.Off there, since a zero field means the default.
func limitOf[T limits.Signed](v T) T {
	if v == 0 {
		return limits.Off
	}
	return v
}

// checkLimits refuses values the node would not take as written: the
// packages below read zero and negative limits as "the default" (and a
// negative one of those that can be off as "off"), so --max-sockets 0 or
// --idle-timeout 0 would silently mean 50000 or 10s.
func checkLimits(c *cli.Context) error {
	if mem := c.Int("max-room-memory"); mem < 1 || mem > 4096 {
		return fmt.Errorf("--max-room-memory must be 1–4096 MiB, not %d", mem)
	}
	for _, name := range []string{"image-cache", "compile-cache"} {
		if v := c.Int(name); v < 0 || v > maxCacheMiB {
			return fmt.Errorf("--%s must be 0 (none) to %d MiB, not %d", name, maxCacheMiB, v)
		}
	}
	for _, name := range []string{"max-resident", "max-module-size", "max-event-output", "max-response", "max-message", "max-sockets", "mailbox-size",
		"upgrade-burst-per-ip", "socket-message-burst", "socket-queue-frames", "socket-queue-bytes", "upload-min-rate", "max-bodies-per-ip",
		"image-files", "front-instances", "front-queue", "fetch-max-request", "fetch-max-response", "fetch-per-room", "fetch-per-node"} {
		if v := c.Int(name); v < 1 {
			return fmt.Errorf("--%s must be at least 1, not %d", name, v)
		}
	}
	for _, name := range []string{"max-sockets-per-ip", "upgrade-rate-per-ip", "socket-message-rate"} {
		if v := c.Int(name); v < 0 {
			return fmt.Errorf("--%s must be 0 (no limit) or more, not %d", name, v)
		}
	}
	for _, name := range []string{"handshake-timeout", "socket-slow-timeout", "socket-write-timeout", "wake-wait", "body-timeout", "fetch-timeout"} {
		if v := c.Duration(name); v <= 0 {
			return fmt.Errorf("--%s must be more than 0, not %s", name, v)
		}
	}
	if v := c.Int64("max-body"); v < 1 {
		return fmt.Errorf("--max-body must be at least 1, not %d", v)
	}
	if v := c.Int("pool-size"); v < 0 {
		return fmt.Errorf("--pool-size must be 0 (no pool) or more, not %d", v)
	}
	if v := c.Duration("idle-timeout"); v <= 0 {
		return fmt.Errorf("--idle-timeout must be more than 0, not %s", v)
	}
	if v := c.Duration("event-timeout"); v < 0 {
		return fmt.Errorf("--event-timeout must be 0 (no limit) or more, not %s", v)
	}
	switch v := c.String("manifests"); v {
	case "", store.ManifestsOverwrite, store.ManifestsNumbered:
	default:
		return fmt.Errorf("--manifests must be %s or %s, not %q", store.ManifestsOverwrite, store.ManifestsNumbered, v)
	}
	if v := c.Duration("commit-window"); v < 0 || v > maxCommitWindow {
		return fmt.Errorf("--commit-window must be 0 (none) to %s, not %s", maxCommitWindow, v)
	}
	if v := c.Duration("call-timeout"); v <= 0 || v > time.Hour {
		return fmt.Errorf("--call-timeout must be more than 0 and at most 1h, not %s", v)
	}
	return nil
}

// run serves until SIGINT or SIGTERM, then stops cleanly. preload runs once
// the node is up (the demo uploads its classes there).
func run(ctx context.Context, cfg node.Config, preload func(*node.Node) error) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		return dataDirAdvice(err)
	}
	if preload != nil {
		if err := preload(n); err != nil {
			_ = n.Stop(context.Background())
			return err
		}
	}
	select {
	case <-ctx.Done():
	case <-n.Lost():
		// Fenced: another node may run this node's rooms now. Nothing is
		// written (every hold is invalid); sockets close with 1012.
		_ = n.Stop(context.Background())
		return cli.Exit("wasmkeep: this node was fenced by the cluster (its lease lapsed or was fenced by hand); exiting", 1)
	}
	stop() // a second signal kills the process the usual way
	cfg.Logger.Info("stopping: hibernating rooms, then closing sockets with 1012")
	return n.Stop(context.Background())
}

// dataDirAdvice adds what to do to the error of a data directory another
// node holds.
func dataDirAdvice(err error) error {
	if inUse := (*store.InUseError)(nil); errors.As(err, &inUse) {
		return fmt.Errorf("%w; stop it or use another --data", err)
	}
	return err
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, not %q", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", format)
}
