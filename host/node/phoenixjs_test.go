package node

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

// TestPhoenixJSClient runs test/phoenix/scenarios.mjs, which drives rooms
// with the real phoenix npm client (1.8.16, ws transport): join, push and
// reply, broadcast between two clients, presence sync, leave, a refused
// join, heartbeats while the room is hibernated, and a rejoin after the
// server closes the socket. The packages come from test/phoenix's lock
// file (testenv.NPMPackages).
func TestPhoenixJSClient(t *testing.T) {
	t.Parallel()
	node := testenv.Tool(t, "node")
	dir := testenv.NPMPackages(t, "test/phoenix", "phoenix")
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
