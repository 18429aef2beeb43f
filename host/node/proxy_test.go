package node

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/socket"
)

// TestAdminBehindProxy: a reverse proxy on the node's own host makes
// every client it forwards reach the node from loopback. With
// --admin-token and --trust-forwarded-for (a node meant to sit behind
// one), a request through the proxy is a remote client's: without the
// token it gets 401, whatever the TCP peer, for the admin API, /metrics
// and pprof alike; with the token it goes through.
func TestAdminBehindProxy(t *testing.T) {
	n := startNode(t, Config{
		Server:  server.Config{AdminToken: "s3cret"},
		Sockets: socket.Config{TrustForwardedFor: true},
	})
	target, _ := url.Parse(n.URL())
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target)) // adds X-Forwarded-For
	defer proxy.Close()
	wasm := buildGuest(t, "./examples/counter")

	send := func(method, path, token string, body []byte) int {
		t.Helper()
		req, err := http.NewRequest(method, proxy.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(server.AdminHeader, "1")
		req.Header.Set("X-Forwarded-For", "203.0.113.9") // what the client claims; the proxy appends its peer
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return doRequest(t, req).Status
	}
	for _, c := range []struct{ method, path string }{
		{"PUT", "/admin/classes/counter"},
		{"GET", "/admin/classes"},
		{"GET", "/metrics"},
		{"GET", "/debug/pprof/"},
	} {
		if got := send(c.method, c.path, "", wasm); got != http.StatusUnauthorized {
			t.Errorf("%s %s through the proxy without the token: %d, want 401", c.method, c.path, got)
		}
	}
	expect(t, 404, "GET", n.URL()+"/admin/classes/counter", nil)
	if got := send("PUT", "/admin/classes/counter", "s3cret", wasm); got != http.StatusCreated {
		t.Errorf("PUT through the proxy with the token: %d, want 201", got)
	}
	// A client of the node's own host still needs no token.
	expect(t, 200, "GET", n.URL()+"/admin/classes/counter", nil)
}
