package node

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/wasmkeep/wasmkeep/host/engine"
	"github.com/wasmkeep/wasmkeep/host/fronts"
	"github.com/wasmkeep/wasmkeep/internal/testwasm"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// The front of these tests is testdata/guests/front; the rooms it calls
// and hands sockets to are testdata/guests/caller's.
const (
	frontGuest  = "./testdata/guests/front"
	callerGuest = "./testdata/guests/caller"
)

// frontURL is the admin URL that uploads class name as a front holding
// prefixes.
func frontURL(n *Node, name string, prefixes ...string) string {
	q := url.Values{"front": prefixes}
	return n.AdminURL() + "/admin/classes/" + name + "?" + q.Encode()
}

// putFront uploads the guest pkg as the front name holding prefixes.
func putFront(t *testing.T, n *Node, name, pkg string, prefixes ...string) {
	t.Helper()
	expect(t, http.StatusCreated, http.MethodPut, frontURL(n, name, prefixes...), testwasm.Build(t, pkg))
}

// TestFrontPrefixesRefused: an upload claiming the node's paths, the
// landing page, or a prefix another front holds (the same, one under it
// or one above it) is refused with 409 naming the holder; a malformed
// prefix with 400. The class listing shows a front's prefixes.
func TestFrontPrefixesRefused(t *testing.T) {
	n := startNode(t, Config{})
	putFront(t, n, "web", frontGuest, "/app", "/api/v1/")
	wasm := testwasm.Build(t, frontGuest)
	for _, c := range []struct {
		prefixes []string
		status   int
		says     string
	}{
		{[]string{"/admin"}, http.StatusConflict, "/admin is the node's own"},
		{[]string{"/actor/x"}, http.StatusConflict, "it serves /actor itself"},
		{[]string{"/metrics"}, http.StatusConflict, "node's own"},
		{[]string{"/cluster/v1"}, http.StatusConflict, "node's own"},
		{[]string{"/"}, http.StatusConflict, "landing page"},
		{[]string{"/shop", "/app"}, http.StatusConflict, "front web holds /app"},
		{[]string{"/app/cart"}, http.StatusConflict, "/app/cart is under /app, which front web holds"},
		{[]string{"/api"}, http.StatusConflict, "/api holds /api/v1, which front web holds"},
		{[]string{"shop"}, http.StatusBadRequest, "it must start with"},
		{[]string{"/a/../b"}, http.StatusBadRequest, "segment"},
	} {
		got := do(t, http.MethodPut, frontURL(n, "shop", c.prefixes...), wasm)
		if got.Status != c.status || !strings.Contains(got.Body, c.says) {
			t.Errorf("shop claiming %q: %d %s, want %d saying %q", c.prefixes, got.Status, got.Body, c.status, c.says)
		}
	}
	// Refused, the upload changed nothing: shop is no class.
	expect(t, http.StatusNotFound, http.MethodGet, n.AdminURL()+"/admin/classes/shop", nil)
	putFront(t, n, "shop", frontGuest, "/apple", "/ap")
	var list []struct {
		Name  string
		Front []string
	}
	if err := json.Unmarshal([]byte(expect(t, 200, http.MethodGet, n.AdminURL()+"/admin/classes", nil)), &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range list {
		got[c.Name] = strings.Join(c.Front, " ")
	}
	if got["web"] != "/api/v1 /app" || got["shop"] != "/ap /apple" {
		t.Fatalf("class listing's prefixes: %q", got)
	}
	// web's new version holds /web alone; shop may take /app then.
	putFront(t, n, "web", frontGuest, "/web")
	putFront(t, n, "shop", frontGuest, "/app")
	if body := expect(t, 200, "GET", n.URL()+"/app/x", nil); body != "front page /app/x" {
		t.Fatalf("GET /app/x after shop took /app: %q", body)
	}
	// Removing a front frees its prefixes, and its path is nothing.
	expect(t, http.StatusNoContent, http.MethodDelete, n.AdminURL()+"/admin/classes/web", nil)
	expect(t, http.StatusNotFound, "GET", n.URL()+"/web/x", nil)
	putFront(t, n, "other", frontGuest, "/web")
}

// TestFrontServes: a front answers under its prefixes, with the full path,
// and reaches rooms with calls; its class has no rooms and takes no
// calls; a front's host has no sockets and no state; the node's own
// paths stay the node's.
func TestFrontServes(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "caller", callerGuest)
	putFront(t, n, "web", frontGuest, "/app", "/api")
	for path, want := range map[string]string{
		"/app": "front page /app", "/app/": "front page /app/", "/api/x/y%2Fz": "front page /api/x/y%2Fz",
	} {
		r := do(t, "GET", n.URL()+path, nil)
		if r.Status != 200 || r.Body != want || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: %d %q (%s), want 200 %q as HTML", path, r.Status, r.Body, r.Header.Get("Content-Type"), want)
		}
	}
	for i, want := range []string{"1", "2", "3"} {
		path := []string{"/app/call", "/api/v2/call", "/app/deep/call"}[i]
		if got := expect(t, 200, "GET", n.URL()+path+"?to=caller/a&payload=count", nil); got != want {
			t.Fatalf("GET %s counting in caller/a: %q, want %s", path, got, want)
		}
	}
	if got := expect(t, 200, "GET", n.URL()+"/actor/caller/a/count", nil); got != "3" {
		t.Fatalf("caller/a counted %q, want 3: the front's calls ran in the room", got)
	}
	if got := expect(t, 200, "GET", n.URL()+"/app/call?to=caller/b&payload=echo:hi", nil); got != "hi" {
		t.Fatalf("echo through the front: %q", got)
	}
	// The callee learns it was called by a front: caller/b calls caller/c
	// with the chain front → b, and a call back to the front's class
	// finds no room.
	if got := expect(t, 200, "GET", n.URL()+"/app/call?to=caller/b&payload=call:web/x:count", nil); !strings.HasPrefix(got, "error:not found: web is a front") {
		t.Fatalf("a room calling the front's class: %q, want not found", got)
	}
	if got := do(t, "GET", n.URL()+"/app/call?to=nope/x&payload=count", nil); got.Status != 502 || !strings.Contains(got.Body, `no class "nope"`) {
		t.Fatalf("a call to no class: %d %q", got.Status, got.Body)
	}
	got := expect(t, 200, "GET", n.URL()+"/app/state", nil)
	if want := "checkpoint wasmkeep: checkpoint: not valid in this state (-5); broadcast wasmkeep: broadcast: not valid in this state (-5); room web/"; got != want {
		t.Fatalf("GET /app/state: %q, want %q", got, want)
	}
	// No rooms of a front.
	r := do(t, "GET", n.URL()+"/actor/web/x", nil)
	if r.Status != http.StatusNotFound || !strings.Contains(r.Body, "class web is a front: it has no rooms, and serves HTTP under /api, /app") {
		t.Fatalf("GET /actor/web/x: %d %q", r.Status, r.Body)
	}
	// Beside the prefixes, nothing.
	for _, path := range []string{"/apple", "/ap", "/x/app"} {
		if r := do(t, "GET", n.URL()+path, nil); r.Status != http.StatusNotFound || strings.Contains(r.Body, "front") {
			t.Errorf("GET %s: %d %q, want the node's 404", path, r.Status, r.Body)
		}
	}
	expect(t, 200, "GET", n.URL()+"/healthz", nil)
	// Responses that add up make the Go guest ask for an idle call, which
	// the pool makes before the instance takes the next request (a request
	// meanwhile may start another instance).
	for range 8 {
		if got := expect(t, 200, "GET", n.URL()+"/app/big?kb=256", nil); len(got) != 256<<10 {
			t.Fatalf("GET /app/big: %d bytes", len(got))
		}
	}
	if v := metric(t, n, "wasmkeep_front_idle_calls_total"); v < 1 {
		t.Errorf("front idle calls: %v, want some after 2 MiB of responses", v)
	}
	if v := metric(t, n, `wasmkeep_front_requests_total{outcome="answered"}`); v < 9 {
		t.Errorf("front requests answered: %v, want at least 9", v)
	}
	if v := metric(t, n, `wasmkeep_front_calls_total{outcome="ok"}`); v < 4 {
		t.Errorf("front calls ok: %v, want at least 4", v)
	}
	if v := metric(t, n, `wasmkeep_front_calls_total{outcome="not_found"}`); v != 1 {
		t.Errorf("front calls not found: %v, want 1", v)
	}
}

// TestFrontServesAtOnce: requests that arrive together are served by
// several instances at once (each waits on a call of its own), never
// more than the pool's bound.
func TestFrontServesAtOnce(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "caller", callerGuest)
	putFront(t, n, "web", frontGuest, "/app")
	const clients = 8
	ids := make([]string, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			// A room each: calls to one room would wait for each other.
			r := do(t, "GET", n.URL()+"/app/slow?ms=300&room=s"+string(rune('a'+i)), nil)
			if r.Status != 200 {
				t.Errorf("client %d: %d %q", i, r.Status, r.Body)
			}
			ids[i] = r.Body
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(seen) < 2 || len(seen) > fronts.DefaultInstances {
		t.Fatalf("%d requests at once were served by %d instances (%q), want 2 to %d", clients, len(seen), ids, fronts.DefaultInstances)
	}
	if v := metric(t, n, "wasmkeep_front_instances"); v < 2 || v > fronts.DefaultInstances {
		t.Fatalf("wasmkeep_front_instances %v, want 2 to %d", v, fronts.DefaultInstances)
	}
	if v := metric(t, n, "wasmkeep_front_instances_busy"); v != 0 {
		t.Fatalf("wasmkeep_front_instances_busy %v once every request is answered", v)
	}
}

// TestFrontQueue: with its one instance busy and its queue full, a front
// refuses the next request with 503 and Retry-After; those that waited
// are served.
func TestFrontQueue(t *testing.T) {
	n := startNode(t, Config{Fronts: fronts.Config{Instances: 1, Queue: 1}})
	putClass(t, n, "caller", callerGuest)
	putFront(t, n, "web", frontGuest, "/app")
	answers := make(chan httpResult, 2)
	slow := func(room string) {
		resp, err := http.Get(n.URL() + "/app/slow?ms=1000&room=" + room)
		if err != nil {
			answers <- httpResult{Status: -1, Body: err.Error()}
			return
		}
		answers <- httpResult{Status: resp.StatusCode, Body: readAll(t, resp)}
	}
	// The first holds the instance; the second waits for it.
	go slow("a")
	waitFor(t, "the first request to hold the instance", func() bool { return metric(t, n, "wasmkeep_front_instances_busy") == 1 })
	go slow("b")
	waitFor(t, "the second request to wait", func() bool { return metric(t, n, "wasmkeep_front_requests_waiting") == 1 })
	r := do(t, "GET", n.URL()+"/app/id", nil)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || !strings.Contains(r.Body, "front web: every instance of the front is busy") {
		t.Fatalf("a request past the queue: %d %q (Retry-After %q), want 503", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	if v := metric(t, n, "wasmkeep_front_queue_full_total"); v != 1 {
		t.Fatalf("wasmkeep_front_queue_full_total %v, want 1", v)
	}
	for range 2 {
		if a := <-answers; a.Status != 200 {
			t.Fatalf("a request that waited: %d %q", a.Status, a.Body)
		}
	}
	expect(t, 200, "GET", n.URL()+"/app/id", nil)
}

// TestFrontCrash: a crash (a trap, the event time limit) answers 500 with
// the reason, and the next request gets a new instance.
func TestFrontCrash(t *testing.T) {
	n := startNode(t, Config{Engine: engine.Config{EventTimeout: time.Second}})
	putFront(t, n, "web", frontGuest, "/app")
	first := expect(t, 200, "GET", n.URL()+"/app/id", nil)
	if again := expect(t, 200, "GET", n.URL()+"/app/id", nil); again != first {
		t.Fatalf("a second request, one after the other: instance %s, then %s", first, again)
	}
	r := do(t, "GET", n.URL()+"/app/crash", nil)
	if r.Status != 500 || !strings.Contains(r.Body, "front web: the front crashed handling this request (its instance is replaced): guest trapped") {
		t.Fatalf("GET /app/crash: %d %q", r.Status, r.Body)
	}
	second := expect(t, 200, "GET", n.URL()+"/app/id", nil)
	if second == first {
		t.Fatalf("after the crash the same instance %s answers", first)
	}
	r = do(t, "GET", n.URL()+"/app/spin", nil)
	if r.Status != 500 || !strings.Contains(r.Body, "event time limit") {
		t.Fatalf("GET /app/spin: %d %q", r.Status, r.Body)
	}
	if third := expect(t, 200, "GET", n.URL()+"/app/id", nil); third == second {
		t.Fatalf("after the timeout the same instance %s answers", second)
	}
	for cause, want := range map[string]float64{"trap": 1, "timeout": 1} {
		if v := metric(t, n, `wasmkeep_front_crashes_total{cause="`+cause+`"}`); v != want {
			t.Errorf("front crashes (%s): %v, want %v", cause, v, want)
		}
	}
	if v := metric(t, n, `wasmkeep_front_requests_total{outcome="crashed"}`); v != 2 {
		t.Errorf("front requests crashed: %v, want 2", v)
	}
	if v := metric(t, n, "wasmkeep_front_instances"); v != 1 {
		t.Errorf("wasmkeep_front_instances %v, want 1: the crashed ones are gone", v)
	}
}

// TestFrontHandsOverSockets: a front checks an upgrade's token and hands
// the socket to a room, which sees the front's header and whose
// broadcasts reach it; a refused token gets the front's answer; a header
// the front may not set is a 500 naming it; a page of another origin is
// refused before the front runs.
func TestFrontHandsOverSockets(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "caller", callerGuest)
	putFront(t, n, "web", frontGuest, "/app")
	c := wstest.Dial(t, n.URL()+"/app/ws?room=lobby&token=letmein")
	if got := c.ReadText(); got != "hello letmein from web" {
		t.Fatalf("the room's greeting: %q, want it to have seen the front's headers", got)
	}
	if got := expect(t, 200, "POST", n.URL()+"/actor/caller/x/call?to=caller/lobby", []byte("broadcast:news")); got != "sent 1" {
		t.Fatalf("the room's broadcast: %q", got)
	}
	if got := c.ReadText(); got != "news" {
		t.Fatalf("the handed-over socket read %q, want the room's broadcast", got)
	}
	c.Send("from the client")
	if got := c.ReadText(); got != "from the client" {
		t.Fatalf("the room's echo of the socket's message: %q", got)
	}
	if row, ok := roomRowOf(t, n, "caller", "lobby"); !ok || row.Sockets != 1 {
		t.Fatalf("caller/lobby: %+v (listed %v), want it with the socket", row, ok)
	}
	for query, want := range map[string]int{
		"room=lobby":                                             http.StatusUnauthorized,
		"room=lobby&token=guess":                                 http.StatusForbidden,
		"room=lobby&token=letmein&header=Origin":                 http.StatusInternalServerError,
		"room=lobby&token=letmein&header=Sec-WebSocket-Protocol": http.StatusInternalServerError,
		"room=lobby&token=letmein&header=Wasmkeep-Peer-Node":     http.StatusInternalServerError,
		"room=lobby&token=letmein&header=Wasmkeep-Front":         http.StatusInternalServerError,
	} {
		if _, err := wstest.DialErr(n.URL()+"/app/ws?"+query, nil); !errors.Is(err, ws.StatusError(want)) {
			t.Errorf("upgrade with %s: %v, want HTTP %d", query, err, want)
		}
	}
	req, _ := http.NewRequest("GET", n.URL()+"/app/ws?room=lobby&token=letmein&header=Origin", nil)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	if r := doRequest(t, req); !strings.Contains(r.Body, "front web handed the socket over with the header Origin, which the node checks as the client sent it") {
		t.Errorf("a hand-over setting Origin: %d %q", r.Status, r.Body)
	}
	// Handed over: the first socket, and the five the node refused for
	// their headers.
	if v := metric(t, n, `wasmkeep_front_requests_total{outcome="handed_over"}`); v != 6 {
		t.Fatalf("front requests handed over: %v, want 6", v)
	}
	served := func() float64 {
		return metric(t, n, `wasmkeep_front_requests_total{outcome="answered"}`) + metric(t, n, `wasmkeep_front_requests_total{outcome="handed_over"}`)
	}
	before := served()
	if _, err := wstest.DialErr(n.URL()+"/app/ws?room=lobby&token=letmein", http.Header{"Origin": {"http://elsewhere.example"}}); !errors.Is(err, ws.StatusError(http.StatusForbidden)) {
		t.Fatalf("an upgrade from a page of another origin: %v, want 403", err)
	}
	if served() != before {
		t.Fatal("the front ran for an upgrade the node refused for its Origin")
	}
}

// TestFrontNewVersion: an upload of a new version switches the front over
// at its next request (the old instance closed), keeping its prefixes.
func TestFrontNewVersion(t *testing.T) {
	n := startNode(t, Config{})
	putFront(t, n, "web", frontGuest, "/app")
	expect(t, 200, "GET", n.URL()+"/app/id", nil)
	putClass(t, n, "web", "./testdata/guests/echo") // no prefixes given: it keeps /app
	got := expect(t, 200, "GET", n.URL()+"/app/x?q=1", nil)
	if !strings.Contains(got, "path /app/x") || !strings.Contains(got, "query q=1") {
		t.Fatalf("GET /app/x after the new version: %q, want the echo guest's answer", got)
	}
	if v := metric(t, n, "wasmkeep_front_instances"); v != 1 {
		t.Fatalf("wasmkeep_front_instances %v, want 1: the old version's instance closed", v)
	}
	if v := metric(t, n, "wasmkeep_front_instance_starts_total"); v != 2 {
		t.Fatalf("wasmkeep_front_instance_starts_total %v, want 2", v)
	}
}

// TestFrontHandOverRelayed: in a cluster, a socket a front hands to a
// room another node runs is relayed to that node, as a client's own
// upgrade for the room is: the room there greets it and its broadcasts
// reach it.
func TestFrontHandOverRelayed(t *testing.T) {
	p := startPair(t, Config{}, Config{})
	putFront(t, p.a, "web", frontGuest, "/app")
	putClass(t, p.b, "caller", callerGuest)
	p.onB("away")
	c := wstest.Dial(t, p.a.URL()+"/app/ws?room=away&token=letmein")
	if got := c.ReadText(); got != "hello letmein from web" {
		t.Fatalf("the room's greeting through A: %q", got)
	}
	if got := expect(t, 200, "POST", p.b.URL()+"/actor/caller/x/call?to=caller/away", []byte("broadcast:from b")); got != "sent 1" {
		t.Fatalf("B's room broadcast: %q", got)
	}
	if got := c.ReadText(); got != "from b" {
		t.Fatalf("the relayed socket read %q", got)
	}
	if got := forwards(t, p.a, "websocket", "ok"); got != 1 {
		t.Fatalf("A relayed %v upgrades, want 1", got)
	}
	if _, ok := roomRowOf(t, p.a, "caller", "away"); ok {
		t.Fatal("A runs the room it relayed the socket to")
	}
}

// TestClientsCannotPoseAsAFront: the headers only a front's hand-over may
// set (Wasmkeep-Front, Wasmkeep-Front-*) are removed from a client's own
// request: a room reached at /actor/ directly never sees them, and so
// can trust them when it does.
func TestClientsCannotPoseAsAFront(t *testing.T) {
	n := startNode(t, Config{})
	putClass(t, n, "caller", callerGuest)
	c := wstest.DialHeader(t, n.URL()+"/actor/caller/lobby", http.Header{
		"Wasmkeep-Front-User": {"mallory"}, "Wasmkeep-Front": {"web"}})
	c.Send("first")
	if got := c.ReadText(); got != "first" {
		t.Fatalf("a client's own socket was first sent %q: the room saw the front's headers", got)
	}
}
