package main

import (
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/internal/limits"
)

// parseServe runs serve's flag parsing and nodeConfig on args, without
// starting anything.
func parseServe(t *testing.T, args ...string) node.Config {
	t.Helper()
	var cfg node.Config
	app := &cli.App{
		Flags: serveFlags(),
		Action: func(c *cli.Context) error {
			var err error
			cfg, err = nodeConfig(c)
			return err
		},
	}
	if err := app.Run(append([]string{"wasmkeep"}, args...)); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return cfg
}

// TestSocketFlags: the socket limits reach the socket layer as the doc
// says, 0 meaning "no limit" where the doc says so.
func TestSocketFlags(t *testing.T) {
	got := parseServe(t).Sockets
	want := socket.Config{
		MaxMessage:        socket.DefaultMaxMessage,
		MaxSockets:        socket.DefaultMaxSockets,
		MaxSocketsPerIP:   socket.DefaultMaxSocketsPerIP,
		UpgradeRatePerIP:  socket.DefaultUpgradeRatePerIP,
		UpgradeBurstPerIP: socket.DefaultUpgradeBurstPerIP,
		HandshakeTimeout:  socket.DefaultHandshakeTimeout,
		MessageRate:       socket.DefaultMessageRate,
		MessageBurst:      socket.DefaultMessageBurst,
		OutboundFrames:    socket.DefaultOutboundFrames,
		OutboundBytes:     socket.DefaultOutboundBytes,
		SlowTimeout:       socket.DefaultSlowTimeout,
		WriteTimeout:      socket.DefaultWriteTimeout,
	}
	if got != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	got = parseServe(t, "--max-sockets-per-ip", "8", "--upgrade-rate-per-ip", "5", "--upgrade-burst-per-ip", "10",
		"--trust-forwarded-for", "--handshake-timeout", "3s", "--socket-message-rate", "0", "--socket-message-burst", "7",
		"--socket-queue-frames", "64", "--socket-queue-bytes", "65536", "--socket-slow-timeout", "1500ms", "--socket-write-timeout", "2s").Sockets
	want = socket.Config{
		MaxMessage:        socket.DefaultMaxMessage,
		MaxSockets:        socket.DefaultMaxSockets,
		MaxSocketsPerIP:   8,
		UpgradeRatePerIP:  5,
		UpgradeBurstPerIP: 10,
		TrustForwardedFor: true,
		HandshakeTimeout:  3 * time.Second,
		MessageRate:       limits.Off,
		MessageBurst:      7,
		OutboundFrames:    64,
		OutboundBytes:     65536,
		SlowTimeout:       1500 * time.Millisecond,
		WriteTimeout:      2 * time.Second,
	}
	if got != want {
		t.Errorf("set:\n got %+v\nwant %+v", got, want)
	}
	got = parseServe(t, "--max-sockets-per-ip", "0", "--upgrade-rate-per-ip", "0").Sockets
	if got.MaxSocketsPerIP != limits.Off || got.UpgradeRatePerIP != limits.Off {
		t.Errorf("--max-sockets-per-ip 0 --upgrade-rate-per-ip 0: %d, %d; want both off", got.MaxSocketsPerIP, got.UpgradeRatePerIP)
	}
}

// TestServeFlagDefaults: serve's flags default to what a zero Config
// means in the packages below (their Default* constants), and a flag's 0
// that means "no limit" reaches them as limits.Off.
func TestServeFlagDefaults(t *testing.T) {
	cfg := parseServe(t)
	if cfg.DataDir != node.DefaultDataDir || cfg.Listen != node.DefaultListen || cfg.MaxModuleBytes != classes.DefaultMaxModuleBytes {
		t.Errorf("node: data %q, listen %q, max module %d", cfg.DataDir, cfg.Listen, cfg.MaxModuleBytes)
	}
	wantEngine := engine.Config{
		MaxMemoryPages:   engine.DefaultMaxMemoryPages,
		EventTimeout:     engine.DefaultEventTimeout,
		MaxResponseBytes: engine.DefaultMaxResponseBytes,
		PoolSize:         engine.DefaultPoolSize,
		CacheBytes:       engine.DefaultCacheBytes,
	}
	if cfg.Engine != wantEngine {
		t.Errorf("engine:\n got %+v\nwant %+v", cfg.Engine, wantEngine)
	}
	r := cfg.Rooms
	if r.IdleTimeout != rooms.DefaultIdleTimeout || r.MaxResident != rooms.DefaultMaxResident || r.WakeWait != rooms.DefaultWakeWait || r.MailboxSize != rooms.DefaultMailboxSize ||
		r.ImageBytes != rooms.DefaultImageBytes || r.ImageFiles != rooms.DefaultImageFiles {
		t.Errorf("rooms: %+v", r)
	}
	srv := cfg.Server
	if srv.MaxRequestBody != server.DefaultMaxRequestBody || srv.BodyTimeout != server.DefaultBodyTimeout ||
		srv.UploadMinRate != server.DefaultUploadMinRate || srv.MaxBodiesPerIP != server.DefaultMaxBodiesPerIP {
		t.Errorf("server: %+v", srv)
	}
	off := parseServe(t, "--event-timeout", "0", "--pool-size", "0").Engine
	if off.EventTimeout != limits.Off || off.PoolSize != limits.Off {
		t.Errorf("--event-timeout 0 --pool-size 0: %v, %d; want both off", off.EventTimeout, off.PoolSize)
	}
	if e := parseServe(t, "--compile-cache", "0").Engine; e.CacheBytes != limits.Off {
		t.Errorf("--compile-cache 0: CacheBytes %d, want off", e.CacheBytes)
	}
	if e := parseServe(t, "--compile-cache", "64").Engine; e.CacheBytes != 64<<20 {
		t.Errorf("--compile-cache 64: CacheBytes %d, want 64 MiB", e.CacheBytes)
	}
	if r := parseServe(t, "--image-cache", "0").Rooms; r.ImageBytes != limits.Off {
		t.Errorf("--image-cache 0: %d, want off", r.ImageBytes)
	}
	if r := parseServe(t, "--image-cache", "64", "--image-files", "9").Rooms; r.ImageBytes != 64<<20 || r.ImageFiles != 9 {
		t.Errorf("--image-cache 64 --image-files 9: %d bytes, %d files", r.ImageBytes, r.ImageFiles)
	}
}
