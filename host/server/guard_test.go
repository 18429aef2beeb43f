package server

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// guarded is an admin handler that answers 204 past the guard.
func guarded(cfg Config, page bool) http.Handler {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s := &Server{guardian: newAdminGuard(cfg)}
	if page {
		return s.adminPage(ok)
	}
	return s.admin(ok)
}

// TestAdminAuth: the token rules of the admin API, with the Basic
// password browsers send, on GET only.
func TestAdminAuth(t *testing.T) {
	basic := func(pw string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+pw)) }
	for _, c := range []struct {
		name      string
		token     string
		remote    string
		method    string
		auth      string
		page      bool
		want      int
		challenge string
	}{
		{"loopback needs no token", "tok", "127.0.0.1:5000", "POST", "", false, 204, ""},
		{"loopback v6", "", "[::1]:5000", "GET", "", false, 204, ""},
		{"remote without a node token", "", "192.0.2.1:5000", "GET", "Bearer tok", false, 403, ""},
		{"remote bearer", "tok", "192.0.2.1:5000", "POST", "Bearer tok", false, 204, ""},
		{"remote wrong bearer", "tok", "192.0.2.1:5000", "GET", "Bearer nope", false, 401, "Bearer"},
		{"remote basic on GET", "tok", "192.0.2.1:5000", "GET", basic("tok"), false, 204, ""},
		{"remote basic on HEAD", "tok", "192.0.2.1:5000", "HEAD", basic("tok"), false, 204, ""},
		{"remote basic on POST", "tok", "192.0.2.1:5000", "POST", basic("tok"), false, 401, "Bearer"},
		{"remote basic on DELETE", "tok", "192.0.2.1:5000", "DELETE", basic("tok"), false, 401, "Bearer"},
		{"remote wrong basic", "tok", "192.0.2.1:5000", "GET", basic("nope"), false, 401, "Bearer"},
		{"page asks browsers for Basic", "tok", "192.0.2.1:5000", "GET", "", true, 401, "Basic"},
		{"page with basic", "tok", "192.0.2.1:5000", "GET", basic("tok"), true, 204, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := guarded(Config{AdminToken: c.token}, c.page)
			req := httptest.NewRequest(c.method, "http://127.0.0.1:8080/admin/rooms", nil)
			req.RemoteAddr = c.remote
			req.Header.Set(AdminHeader, "1")
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Fatalf("status %d, want %d", rec.Code, c.want)
			}
			if got := rec.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, c.challenge) || (c.challenge == "") != (got == "") {
				t.Fatalf("challenge %q, want %q", got, c.challenge)
			}
		})
	}
}

// TestAdminGuard: what no browser may make the node do, whatever the
// client's address: answer for a name that is not the node's (DNS
// rebinding), serve a page of another origin, or take a state-changing
// request an HTML form could send; and what makes a loopback peer not a
// local client (a proxy's forwarding headers).
func TestAdminGuard(t *testing.T) {
	const loopback, remote = "127.0.0.1:5000", "192.0.2.1:5000"
	type header = map[string]string
	for _, c := range []struct {
		name   string
		cfg    Config
		method string
		host   string
		remote string
		header header
		page   bool
		want   int
		says   string
	}{
		{name: "loopback, own address", want: 204},
		{name: "localhost", host: "localhost:8080", want: 204},
		{name: "::1", host: "[::1]:8080", want: 204},
		{name: "another loopback address", host: "127.0.0.2:8080", want: 403, says: "own names"},
		{name: "rebinding", host: "attacker.example:8080", want: 403, says: "own names"},
		{name: "rebinding, a PUT with the header", method: "PUT", host: "attacker.example:8080", header: header{AdminHeader: "1"}, want: 403},
		{name: "rebinding with the token", cfg: Config{AdminToken: "tok"}, remote: remote, host: "attacker.example",
			header: header{"Authorization": "Bearer tok"}, want: 403},
		{name: "an address the loopback listener is not on", host: "192.0.2.9:8080", want: 403},
		{name: "any address of a wildcard listener", cfg: Config{AdminAddrs: []string{"0.0.0.0:8080"}}, host: "192.0.2.9:8080", want: 204},
		{name: "localhost on a wildcard listener", cfg: Config{AdminAddrs: []string{":8080"}}, host: "localhost:8080", want: 204},
		{name: "a name on a wildcard listener", cfg: Config{AdminAddrs: []string{"[::]:8080"}}, host: "attacker.example:8080", want: 403},
		{name: "a named listener", cfg: Config{AdminAddrs: []string{"node.internal:8080", "10.0.0.5:8080"}}, host: "node.internal:8080", want: 204},
		{name: "the named listener's address", cfg: Config{AdminAddrs: []string{"node.internal:8080", "10.0.0.5:8080"}}, host: "10.0.0.5:8080", want: 204},
		{name: "an added name", cfg: Config{AdminHosts: []string{"Node.Example"}}, host: "NODE.example.:443", want: 204},
		{name: "no Host (HTTP/1.0)", host: "-", want: 204},

		{name: "foreign Origin on GET", header: header{"Origin": "http://evil.example"}, want: 403, says: "another origin"},
		{name: "foreign Origin on POST", method: "POST", header: header{"Origin": "http://evil.example", AdminHeader: "1"}, want: 403},
		{name: "another port is another origin", method: "POST", header: header{"Origin": "http://127.0.0.1:9999", AdminHeader: "1"}, want: 403},
		{name: "null Origin", method: "POST", header: header{"Origin": "null", AdminHeader: "1"}, want: 403},
		{name: "own Origin", method: "POST", header: header{"Origin": "http://127.0.0.1:8080", AdminHeader: "1"}, want: 204},
		{name: "cross-site fetch", header: header{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, want: 403},
		{name: "same-site fetch", header: header{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, want: 403},
		{name: "same-origin fetch", header: header{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}, want: 204},
		{name: "typed URL", header: header{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}, want: 204},
		{name: "link to the dashboard", page: true, header: header{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, want: 204},
		{name: "link to an admin GET", header: header{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, want: 403},
		{name: "cross-site form to the page", page: true, method: "POST", header: header{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", AdminHeader: "1"}, want: 403},

		{name: "POST without the header", method: "POST", want: 403, says: AdminHeader},
		{name: "POST text/plain", method: "POST", header: header{"Content-Type": "text/plain"}, want: 403},
		{name: "POST form", method: "POST", header: header{"Content-Type": "application/x-www-form-urlencoded"}, want: 403},
		{name: "POST multipart", method: "POST", header: header{"Content-Type": "multipart/form-data; boundary=x"}, want: 403},
		{name: "POST JSON", method: "POST", header: header{"Content-Type": "application/json; charset=utf-8"}, want: 204},
		{name: "PUT without the header", method: "PUT", header: header{"Content-Type": "application/wasm"}, want: 403},
		{name: "PUT with the header", method: "PUT", header: header{AdminHeader: "1"}, want: 204},
		{name: "DELETE without the header", method: "DELETE", want: 403},
		{name: "HEAD", method: "HEAD", want: 204},

		{name: "proxied without a token on the node", header: header{"X-Forwarded-For": "203.0.113.9"}, want: 403, says: "loopback clients only"},
		{name: "proxied without a token", cfg: Config{AdminToken: "tok"}, header: header{"X-Forwarded-For": "203.0.113.9"}, want: 401},
		{name: "proxied with the token", cfg: Config{AdminToken: "tok"}, header: header{"X-Forwarded-For": "203.0.113.9", "Authorization": "Bearer tok"}, want: 204},

		{name: "a peer's call", header: header{PeerHeader: "n2"}, want: 403, says: "no node-to-node request"},
		{name: "a peer's call to the page", page: true, header: header{PeerSigHeader: "00"}, want: 403, says: "no node-to-node request"},
		{name: "a peer's call with the token", cfg: Config{AdminToken: "tok"}, remote: remote,
			header: header{PeerTimeHeader: "1", "Authorization": "Bearer tok"}, want: 403, says: "no node-to-node request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			method, host := c.method, c.host
			if method == "" {
				method = "GET"
			}
			if host == "" {
				host = "127.0.0.1:8080"
			}
			req := httptest.NewRequest(method, "/admin/rooms", nil)
			req.Host = strings.TrimPrefix(host, "-")
			req.RemoteAddr = loopback
			if c.remote != "" {
				req.RemoteAddr = c.remote
			}
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			guarded(c.cfg, c.page).ServeHTTP(rec, req)
			if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.says) {
				t.Fatalf("status %d, want %d (saying %q): %s", rec.Code, c.want, c.says, rec.Body)
			}
		})
	}
}

// TestForwardingHeaders: any one of the headers by which proxies say
// whom they forward for makes a loopback peer a remote client.
func TestForwardingHeaders(t *testing.T) {
	h := guarded(Config{AdminToken: "tok"}, false)
	for _, name := range forwardingHeaders {
		req := httptest.NewRequest("GET", "http://127.0.0.1:8080/admin/rooms", nil)
		req.RemoteAddr = "127.0.0.1:5000"
		req.Header.Set(name, "for=203.0.113.9")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("%s from loopback without the token: %d, want 401", name, rec.Code)
		}
	}
}
