package node

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
)

// TestAdminListen: with an admin listener, the admin API, the dashboard,
// /metrics and pprof answer there only. The rooms' listener, and a proxy
// in front of it, serve none of them (404, naming --admin-listen), and
// rooms are not served on the admin listener.
func TestAdminListen(t *testing.T) {
	n := startNode(t, Config{AdminListen: "127.0.0.1:0"})
	if n.AdminAddr() == n.Addr() {
		t.Fatalf("the admin listener is the rooms' one: %s", n.Addr())
	}
	putClass(t, n, "counter", "./examples/counter")
	expect(t, 200, "POST", n.URL()+"/actor/counter/a", nil)
	target, _ := url.Parse(n.URL())
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	defer proxy.Close()

	wasm := buildGuest(t, "./examples/counter")
	for _, base := range []string{n.URL(), proxy.URL} {
		for _, c := range []struct{ method, path string }{
			{"GET", "/admin"}, {"GET", "/admin/"}, {"GET", "/admin/rooms"}, {"GET", "/admin/classes"},
			{"PUT", "/admin/classes/other"}, {"POST", "/admin/rooms/counter/a/hibernate"}, {"POST", "/admin/rooms/counter/a/export"},
			{"GET", "/metrics"}, {"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/profile"},
		} {
			r := do(t, c.method, base+c.path, wasm)
			if r.Status != 404 || !strings.Contains(r.Body, "--admin-listen") {
				t.Errorf("%s %s: %d %q, want 404 naming --admin-listen", c.method, base+c.path, r.Status, r.Body)
			}
		}
	}
	expect(t, 404, "GET", n.URL()+"/admin/classes/other", nil) // nothing was uploaded

	admin := n.AdminURL()
	if page := expect(t, 200, "GET", admin+"/admin/", nil); !strings.Contains(page, `<table id="rooms"`) {
		t.Errorf("the dashboard: %.200s", page)
	}
	if m := expect(t, 200, "GET", admin+"/metrics", nil); !strings.Contains(m, "wasmkeep_rooms_resident") {
		t.Errorf("/metrics: %.200s", m)
	}
	expect(t, 200, "GET", admin+"/debug/pprof/", nil)
	expect(t, 200, "GET", admin+"/healthz", nil)
	if row, ok := roomRowOf(t, n, "counter", "a"); !ok || row.State != "resident" {
		t.Errorf("the admin listener lists counter/a as %+v (%v)", row, ok)
	}
	hibernate(t, n, "counter", "a")
	if r := do(t, "POST", admin+"/actor/counter/a", nil); r.Status != 404 || !strings.Contains(r.Body, "--listen") {
		t.Errorf("a room on the admin listener: %d %q, want 404", r.Status, r.Body)
	}
	stop(t, n)
}
