package main

import (
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/wasmkeep/wasmkeep/host/node"
	"github.com/wasmkeep/wasmkeep/host/socket"
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
		MaxMessage:        1 << 20,
		MaxSockets:        50000,
		UpgradeBurstPerIP: 20,
		HandshakeTimeout:  10 * time.Second,
		MessageRate:       1000,
		MessageBurst:      2000,
		OutboundFrames:    256,
		OutboundBytes:     1 << 20,
		SlowTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
	}
	if got != want {
		t.Errorf("defaults:\n got %+v\nwant %+v", got, want)
	}
	got = parseServe(t, "--max-sockets-per-ip", "8", "--upgrade-rate-per-ip", "5", "--upgrade-burst-per-ip", "10",
		"--trust-forwarded-for", "--handshake-timeout", "3s", "--socket-message-rate", "0", "--socket-message-burst", "7",
		"--socket-queue-frames", "64", "--socket-queue-bytes", "65536", "--socket-slow-timeout", "1500ms", "--socket-write-timeout", "2s").Sockets
	want = socket.Config{
		MaxMessage:        1 << 20,
		MaxSockets:        50000,
		MaxSocketsPerIP:   8,
		UpgradeRatePerIP:  5,
		UpgradeBurstPerIP: 10,
		TrustForwardedFor: true,
		HandshakeTimeout:  3 * time.Second,
		MessageRate:       socket.Unlimited,
		MessageBurst:      7,
		OutboundFrames:    64,
		OutboundBytes:     65536,
		SlowTimeout:       1500 * time.Millisecond,
		WriteTimeout:      2 * time.Second,
	}
	if got != want {
		t.Errorf("set:\n got %+v\nwant %+v", got, want)
	}
}
