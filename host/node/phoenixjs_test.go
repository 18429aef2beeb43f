package node

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// TestPhoenixJSClient runs test/phoenix/scenarios.mjs, which drives rooms
// with the real phoenix npm client (1.8.16, ws transport): join, push and
// reply, broadcast between two clients, presence sync, leave, a refused
// join, heartbeats while the room is hibernated, and a rejoin after the
// server closes the socket. The packages are installed from the lock file
// the first time (CI does it in .ci/run).
func TestPhoenixJSClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; CI installs it")
	}
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "test", "phoenix")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "phoenix")); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in test/phoenix: %v\n%s", err, out)
		}
	}
	n := startNode(t, Config{})
	putClass(t, n, "presence", "./examples/presence")
	putClass(t, n, "channels", "./testdata/guests/channels")
	for _, scenario := range []string{"chat", "refused", "heartbeat", "rejoin"} {
		t.Run(scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, "scenarios.mjs", n.URL(), scenario)
			cmd.Dir = dir
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil || !bytes.Contains(out.Bytes(), []byte("ok "+scenario)) {
				t.Fatalf("%v\n%s", err, out.String())
			}
		})
	}
}
