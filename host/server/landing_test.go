package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
)

// newEngineServer is newTestServer with a real engine, serving a real
// listener on 127.0.0.1; it returns the server, its registry and its URL.
func newEngineServer(t *testing.T, cfg Config) (*Server, *classes.Registry, string) {
	t.Helper()
	eng, err := engine.New(context.Background(), engine.Config{CacheDir: testwasm.CompileCacheDir(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	bucket := store.NewMem()
	reg := classes.New(bucket, eng, 0)
	mgr, err := rooms.NewManager(context.Background(), rooms.Config{}, rooms.EngineClasses(reg), bucket, rooms.NewLocal(1))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	set := metrics.NewSet()
	hub := socket.NewHub(socket.Config{}, set)
	s := New(cfg, reg, mgr, hub, set)
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		srv.Close()
		s.Close()
		hub.Close()
		_ = mgr.Close(context.Background())
		_ = eng.Close(context.Background())
	})
	return s, reg, srv.URL
}

func get(t *testing.T, u string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header
}

// TestLandingPage: GET / on a loopback listener, from loopback, shows the
// classes, the first rooms (names escaped) and the links to the dashboard
// and the docs, and never the admin token; any other path, a forwarded
// request and a request for a name that is not the node's get the 404.
func TestLandingPage(t *testing.T) {
	const token = "the-admin-token-of-the-test"
	_, reg, base := newEngineServer(t, Config{AdminToken: token})
	if _, err := reg.Put(context.Background(), "echo", testwasm.Build(t, "./testdata/guests/echo"), classes.Options{}); err != nil {
		t.Fatal(err)
	}
	const odd = `<b>"x&y'`
	names := []string{odd}
	for i := range landingRooms + 2 {
		names = append(names, "room-"+string(rune('a'+i)))
	}
	for _, n := range names {
		if status, body, _ := get(t, base+"/actor/echo/"+url.PathEscape(n)); status != 200 {
			t.Fatalf("GET room %q: %d %s", n, status, body)
		}
	}

	status, page, h := get(t, base+"/")
	if status != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %q\n%s", status, h.Get("Content-Type"), page)
	}
	if h.Get("Content-Security-Policy") != landingCSP || !strings.Contains(landingCSP, "default-src 'none'") {
		t.Errorf("GET /: policy %q", h.Get("Content-Security-Policy"))
	}
	for _, want := range []string{"<td>echo</td>", `href="/admin/"`, `href="` + docsURL + `"`,
		`echo/&lt;b&gt;&#34;x&amp;y&#39;`, `href="/actor/echo/%3Cb%3E%22x&amp;y%27"`, "and 3 more"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	for _, bad := range []string{odd, token, "<script"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q:\n%s", bad, page)
		}
	}
	if n := strings.Count(page, "<li>"); n != landingRooms {
		t.Errorf("the page lists %d rooms, want %d", n, landingRooms)
	}

	for _, c := range []struct {
		name, path string
		header     []string
	}{
		{"another path", "/index.html", nil},
		{"a path below /", "/x/", nil},
		{"forwarded by a proxy", "/", []string{"X-Forwarded-For", "203.0.113.9"}},
		{"for another name (rebinding)", "/", []string{"Host", "evil.example"}},
		{"from another site's page", "/", []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		status, body, _ := get(t, base+c.path, c.header...)
		if status != 404 || strings.Contains(body, "echo") {
			t.Errorf("%s: GET %s: %d %q, want the bare 404", c.name, c.path, status, body)
		}
	}
	resp, err := http.Post(base+"/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("POST /: %d, want 404", resp.StatusCode)
	}
}

// TestLandingPageOffLoopback: a request that reached the node on an
// address off loopback (a node listening on every address, reached
// through its public one) gets the 404, whoever sent it.
func TestLandingPageOffLoopback(t *testing.T) {
	s := newTestServer(t, Config{})
	for _, c := range []struct {
		local, remote string
		want          int
	}{
		{"192.0.2.10:8080", "127.0.0.1:5000", 404},
		{"192.0.2.10:8080", "198.51.100.7:5000", 404},
		{"127.0.0.1:8080", "198.51.100.7:5000", 404},
		{"127.0.0.1:8080", "127.0.0.1:5000", 200},
		{"[::1]:8080", "[::1]:5000", 200},
	} {
		local, err := net.ResolveTCPAddr("tcp", c.local)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", "http://"+c.local+"/", nil)
		req.RemoteAddr = c.remote
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
		if got := s.landingAllowed(req); got != (c.want == 200) {
			t.Errorf("to %s from %s: allowed %v, want %v", c.local, c.remote, got, c.want == 200)
		}
		if c.want == 404 {
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != 404 {
				t.Errorf("to %s from %s: GET / answered %d, want 404", c.local, c.remote, rec.Code)
			}
		}
	}
}

// TestBuildErrorShown: with a dev loop's build error recorded for a
// class, its rooms' HTML pages carry the error in a banner, escaped; other
// answers are unchanged; a class that never built answers with a page of
// the error; another class, and a node without BuildErrors, see nothing.
func TestBuildErrorShown(t *testing.T) {
	const msg = "main.go:3:1: syntax error: <unexpected> & \"more\""
	page := &abi.Response{Status: 200, Headers: []abi.Header{{Name: "content-type", Value: "Text/HTML; charset=utf-8"}}, Body: []byte("<!doctype html><p>hi</p>")}
	got := withBuildError(page, msg)
	if !strings.HasPrefix(string(got.Body), string(page.Body)) || !strings.Contains(string(got.Body), `id="wasmkeep-build-error"`) ||
		!strings.Contains(string(got.Body), "syntax error: &lt;unexpected&gt; &amp; &#34;more&#34;") || strings.Contains(string(got.Body), "<unexpected>") {
		t.Errorf("the page with the banner:\n%s", got.Body)
	}
	if string(page.Body) != "<!doctype html><p>hi</p>" {
		t.Error("withBuildError changed the response it was given")
	}
	data := &abi.Response{Status: 200, Headers: []abi.Header{{Name: "Content-Type", Value: "application/json"}}, Body: []byte(`{}`)}
	if withBuildError(data, msg) != data {
		t.Error("a JSON answer got the banner")
	}

	var errs BuildErrors
	_, _, base := newEngineServer(t, Config{BuildErrors: &errs})
	errs.Set("broken", msg)
	status, body, h := get(t, base+"/actor/broken/lobby")
	if status != 503 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(body, "&lt;unexpected&gt;") {
		t.Errorf("a room of a class that never built: %d %q\n%s", status, h.Get("Content-Type"), body)
	}
	if status, body, _ := get(t, base+"/actor/other/lobby"); status != 404 {
		t.Errorf("a room of an unknown class without a build error: %d %s", status, body)
	}
	errs.Set("broken", "")
	if status, body, _ := get(t, base+"/actor/broken/lobby"); status != 404 {
		t.Errorf("after a good build cleared the error: %d %s", status, body)
	}
	if (*BuildErrors)(nil).Get("broken") != "" {
		t.Error("a nil BuildErrors has an error")
	}
}
