package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

// TestClientLibraryAcrossDrainAndFailover: the client library
// (clients/js), in headless Chromium (test/dashboard/client.mjs), keeps a
// socket to a room of a three-node cluster through a proxy in front of
// it, as a load balancer would be: across a drain of the room's node, and
// across a SIGKILL of the node that runs it next. Each time the socket
// closes, the library reconnects through the proxy to a node that can
// reach the room, and the message the page sent meanwhile is echoed.
func TestClientLibraryAcrossDrainAndFailover(t *testing.T) {
	t.Parallel()
	node := testenv.Tool(t, "node")
	browser := testenv.Chromium(t)
	scripts := testenv.NPMPackages(t, "test/dashboard", "playwright-core")
	c := startE2ECluster(t, 3, e2eTTL)
	c.putClass(c.nodes[0], "echo", "./testdata/guests/echo", false)

	// The proxy sends each connection to the first node that runs and
	// does not drain, as a load balancer's health checks would.
	var mu sync.Mutex
	out := map[string]bool{} // nodes drained or killed
	target := func() *clusterProc {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range c.nodes {
			if !out[n.name] && n.running() {
				return n
			}
		}
		return c.nodes[0]
	}
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		u, _ := url.Parse(target().url)
		r.SetURL(u)
		r.Out.Host = r.In.Host // the page's origin is the proxy's: same-origin for the node
	}})
	defer proxy.Close()

	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec, ok := c.record("echo", "r") // the page's room
		if !ok || rec.Free {
			http.Error(w, "no node holds the room", 500)
			return
		}
		var owner *clusterProc
		for _, n := range c.nodes {
			if n.name == rec.Node {
				owner = n
			}
		}
		switch r.URL.Path {
		case "/drain":
			mu.Lock()
			out[owner.name] = true
			mu.Unlock()
			if res := wk(t, nil, "cluster", "drain", "--server", owner.url, "--wait", owner.name); res.code != 0 {
				http.Error(w, res.String(), 500)
				return
			}
		case "/kill":
			mu.Lock()
			out[owner.name] = true
			mu.Unlock()
			owner.signal(syscall.SIGKILL)
		default:
			http.NotFound(w, r)
			return
		}
		t.Logf("%s: %s, which ran the room", r.URL.Path[1:], owner.name)
	}))
	defer control.Close()

	root := moduleRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", proxy.URL, control.URL, filepath.Join(root, "clients", "js", "index.js"), "drain", "kill")
	cmd.Dir = scripts
	cmd.Env = append(os.Environ(), "CHROMIUM="+browser)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	t.Log(buf.String())
	if err != nil || !strings.Contains(buf.String(), "ok client") {
		t.Fatalf("client.mjs: %v", err)
	}
}
