package node

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/wasmbuild"
)

// TestClientLibraryAcrossARestart: the client library (clients/js), in
// headless Chromium (test/dashboard/client.mjs), keeps a socket to a room
// across a clean restart of the node: the close is 1012, it reconnects,
// and what the page sent while it was down is sent once it is open again.
func TestClientLibraryAcrossARestart(t *testing.T) {
	driver := findChromiumDriver(t)
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	n := startNode(t, Config{DataDir: dir, Listen: addr})
	putClass(t, n, "echo", "./testdata/guests/echo")

	var mu sync.Mutex
	restarted := 0
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if err := n.Stop(context.Background()); err != nil {
			http.Error(w, "stop: "+err.Error(), 500)
			return
		}
		// The same port: the page's socket reconnects to the same URL.
		var err error
		for try := 0; try < 50; try++ {
			if n, err = Start(context.Background(), Config{DataDir: dir, Listen: addr, Logger: testLogger(t),
				Engine: n.cfg.Engine, Rooms: n.cfg.Rooms}); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond) // the port freed by the stop
		}
		if err != nil {
			http.Error(w, "start: "+err.Error(), 500)
			return
		}
		restarted++
	}))
	defer ctl.Close()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		_ = n.Stop(context.Background())
	})
	out := driver.run(t, 2*time.Minute, "client", "client.mjs", "http://"+addr, ctl.URL, filepath.Join(driver.root, "clients", "js", "index.js"), "restart")
	t.Log(out)
	mu.Lock()
	defer mu.Unlock()
	if restarted != 1 {
		t.Fatalf("restarted %d times, want 1", restarted)
	}
}

// TestClientLibraryUnits runs the client library's own tests
// (clients/js/index.test.mjs) under Node: its close policy, its waits,
// its queue and its reconnect loop over a fake WebSocket.
func TestClientLibraryUnits(t *testing.T) {
	node := testenv.Tool(t, "node")
	root, err := wasmbuild.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "--test", "index.test.mjs")
	cmd.Dir = filepath.Join(root, "clients", "js")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
}
