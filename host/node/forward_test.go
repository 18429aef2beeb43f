package node

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
	"github.com/wasmkeep/wasmkeep/internal/wstest"
)

// Forwarding between two real nodes: A, whose placement says which rooms
// run elsewhere, and B, which runs them. Neither shares the other's
// bucket: a room B serves exists on B only, so an answer from it proves
// the request went there. A has no class at all unless a test serves a
// room on A too.

var clusterSecret = []byte("forward-test-secret")

// steeredPlacement is a single node's placement whose routes the test
// sets and changes, by room name; it counts what it was asked.
type steeredPlacement struct {
	*rooms.Local
	mu     sync.Mutex
	routes map[string]rooms.Route
	asked  map[string]int
}

func newSteered() *steeredPlacement {
	return &steeredPlacement{Local: rooms.NewLocal(1), routes: map[string]rooms.Route{}, asked: map[string]int{}}
}

func (p *steeredPlacement) Route(_ context.Context, key rooms.Key) (rooms.Route, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked[key.Name]++
	if r, ok := p.routes[key.Name]; ok {
		return r, nil
	}
	return rooms.Route{Kind: rooms.RouteHere}, nil
}

func (p *steeredPlacement) set(name string, r rooms.Route) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[name] = r
}

func (p *steeredPlacement) times(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked[name]
}

// member is a cluster membership that routes by its placement: it
// forwards to the node the placement names, routes once more after a
// node it could not reach (recording it, and running onUnreachable, if
// set, first), and refuses what waits. The member's own routing rules
// (the failover wait, the hop rule, re-routing) are cluster/member's,
// tested there; these tests are of the forwarding itself.
// Its status is status, and Where says what places says.
type member struct {
	place         rooms.Placement
	mu            sync.Mutex
	unreachable   []string
	onUnreachable func(node string)
	status        server.ClusterNode
	places        map[rooms.Key]server.RoomPlace
}

func (m *member) Dispatch(ctx context.Context, key rooms.Key, forwarded bool, forward func(ctx context.Context, node, address string) bool) server.ClusterRoute {
	for try := 0; ; try++ {
		route, err := m.place.Route(ctx, key)
		switch {
		case err != nil:
			return server.ClusterRoute{Err: err}
		case route.Kind == rooms.RouteHere:
			return server.ClusterRoute{Serve: true}
		case route.Kind == rooms.RouteWait:
			return server.ClusterRoute{Refused: "wait; retry"}
		case forwarded:
			return server.ClusterRoute{Refused: "the room moved; retry", Moved: true}
		case try > 0 && route.Node == m.last():
			return server.ClusterRoute{Refused: "the room's node " + route.Node + " cannot be reached; retry"}
		}
		if !forward(ctx, route.Node, route.Address) {
			return server.ClusterRoute{Answered: true}
		}
		m.Unreachable(ctx, route.Node)
	}
}

func (m *member) last() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unreachable[len(m.unreachable)-1]
}

func (m *member) Status() server.ClusterNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}
func (m *member) Ready() error     { return nil }
func (m *member) Drain(bool) error { return errors.New("not in this test") }
func (m *member) Move(context.Context, rooms.Key, string) (string, error) {
	return "", errors.New("not in this test")
}
func (m *member) Take(context.Context, rooms.Key) error   { return errors.New("not in this test") }
func (m *member) FenceNode(context.Context, string) error { return errors.New("not in this test") }
func (m *member) Peer(context.Context, string) (server.ClusterPeer, bool) {
	return server.ClusterPeer{}, false
}
func (m *member) Gone(string) bool { return false }

// Where places the rooms of places, and leaves out the others.
func (m *member) Where(_ context.Context, keys []rooms.Key, _ int) map[rooms.Key]server.RoomPlace {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[rooms.Key]server.RoomPlace{}
	for _, k := range keys {
		if p, ok := m.places[k]; ok {
			out[k] = p
		}
	}
	return out
}

func (m *member) Unreachable(_ context.Context, node string) {
	m.mu.Lock()
	m.unreachable = append(m.unreachable, node)
	hook := m.onUnreachable
	m.mu.Unlock()
	if hook != nil {
		hook(node)
	}
}

func (m *member) calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.unreachable...)
}

// clusterNode starts a cluster member named name.
func clusterNode(t *testing.T, name string, place rooms.Placement, m *member, cfg Config) *Node {
	t.Helper()
	cfg.Placement = place
	m.place = place
	cfg.Server.Cluster = &server.Cluster{Node: name, Secret: clusterSecret, Member: m}
	return startNode(t, cfg)
}

// pair is node A (n1), which forwards, and node B (n2), which runs the
// echo class.
type pair struct {
	a, b           *Node
	placeA, placeB *steeredPlacement
	memberA        *member
}

func startPair(t *testing.T, cfgA, cfgB Config) *pair {
	t.Helper()
	p := &pair{placeA: newSteered(), placeB: newSteered(), memberA: &member{}}
	if cfgA.Server.Cluster == nil {
		cfgA.Server.Cluster = &server.Cluster{}
	}
	if cfgB.Server.Cluster == nil {
		cfgB.Server.Cluster = &server.Cluster{}
	}
	p.b = clusterNode(t, "n2", p.placeB, &member{}, cfgB)
	p.a = clusterNode(t, "n1", p.placeA, p.memberA, cfgA)
	putClass(t, p.b, "echo", "./testdata/guests/echo")
	return p
}

// onB routes name from A to B.
func (p *pair) onB(name string) {
	p.placeA.set(name, rooms.Route{Kind: rooms.RouteElsewhere, Node: "n2", Address: p.b.Addr()})
}

func forwards(t *testing.T, n *Node, kind, outcome string) float64 {
	t.Helper()
	return metric(t, n, `wasmkeep_cluster_forwards_total{kind="`+kind+`",outcome="`+outcome+`"}`)
}

// TestForwardHTTP: a request to A for a room on B reaches B's room, and
// B's answer (status, headers, body) comes back; B counts it, A serves
// nothing itself.
func TestForwardHTTP(t *testing.T) {
	p := startPair(t, Config{}, Config{})
	p.onB("away")
	req, err := http.NewRequest("POST", p.a.URL()+"/actor/echo/away/some/path?status=201&a=1", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test", "hello")
	r := doRequest(t, req)
	want := "method POST\npath /some/path\nquery status=201&a=1\nx-test hello\nbody payload"
	if r.Status != http.StatusCreated || r.Header.Get("X-Echo") != "1" || r.Body != want {
		t.Fatalf("through A: %d %v %q, want 201, X-Echo and %q", r.Status, r.Header, r.Body, want)
	}
	if got := expect(t, 200, "GET", p.a.URL()+"/actor/echo/away/room", nil); got != "echo/away" {
		t.Fatalf("the room's name through A: %q", got)
	}
	if _, ok := roomRowOf(t, p.b, "echo", "away"); !ok {
		t.Error("the room does not run on B")
	}
	if _, ok := roomRowOf(t, p.a, "echo", "away"); ok {
		t.Error("the room runs on A")
	}
	if got := forwards(t, p.a, "http", "ok"); got != 2 {
		t.Errorf("A counted %v HTTP forwards, want 2", got)
	}
	if got := metric(t, p.b, `wasmkeep_http_requests_total{code="2xx"}`); got < 2 {
		t.Errorf("B answered %v requests with 2xx", got)
	}
	// A body over A's limit is refused by A.
	small := startPair(t, Config{Server: server.Config{MaxRequestBody: 16}}, Config{})
	small.onB("away")
	if r := do(t, "POST", small.a.URL()+"/actor/echo/away", make([]byte, 17)); r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the forwarding node's limit: %d %q", r.Status, r.Body)
	}
	if got := metric(t, small.b, `wasmkeep_http_requests_total{code="4xx"}`) + metric(t, small.b, `wasmkeep_http_requests_total{code="2xx"}`); got != 1 {
		t.Errorf("B saw %v requests, want only the class upload", got)
	}
}

// TestForwardWebSocket: an upgrade to A for a room on B is relayed: the
// socket lives on B (B's hub counts it, A's does not) and echoes through
// A. B's per-address limit counts each client under its own address, not
// A's; A's cap on relayed sockets is its socket cap; an Origin A refuses
// never reaches B.
func TestForwardWebSocket(t *testing.T) {
	t.Parallel()
	p := startPair(t, Config{Sockets: socket.Config{MaxSockets: 2}}, Config{Sockets: socket.Config{MaxSocketsPerIP: 1}})
	p.onB("away")
	url := p.a.URL() + "/actor/echo/away/ws?x=1"
	c := wstest.Dial(t, url)
	if got := c.ReadText(); got != "open /ws?x=1" {
		t.Fatalf("greeting through A: %q", got)
	}
	c.Send("hello")
	if got := c.ReadText(); got != "hello" {
		t.Fatalf("echo through A: %q", got)
	}
	// Each client address has its one socket on B.
	other := openEcho(t, url, dialOpts{local: "127.0.0.2"})
	other.send("again")
	if got, err := other.next(wstest.Timeout); err != nil || got != "again" {
		t.Fatalf("echo from a second address: %q %v", got, err)
	}
	if b, a := p.b.Hub.Count(), p.a.Hub.Count(); b != 2 || a != 0 {
		t.Fatalf("sockets: %d on B, %d on A; want 2 and 0", b, a)
	}
	if got := metric(t, p.a, "wasmkeep_cluster_relayed_sockets"); got != 2 {
		t.Fatalf("A relays %v sockets, want 2", got)
	}
	rejected := func() float64 {
		return metric(t, p.b, `wasmkeep_socket_upgrades_rejected_total{reason="ip_concurrent"}`)
	}
	before := rejected()
	// A is at its cap of two relayed sockets: refused by A.
	dialRefused(t, url, dialOpts{local: "127.0.0.3"}, http.StatusTooManyRequests)
	if got := rejected(); got != before {
		t.Fatal("an upgrade past A's relay cap reached B")
	}
	other.conn.Close()
	waitFor(t, "the relay to end", func() bool { return metric(t, p.a, "wasmkeep_cluster_relayed_sockets") == 1 })
	// 127.0.0.1 has its socket on B: refused by B, through A.
	dialRefused(t, url, dialOpts{}, http.StatusTooManyRequests)
	if got := rejected(); got != before+1 {
		t.Fatalf("B refused %v upgrades for the address's limit, want 1", got-before)
	}
	if _, err := wstest.DialErr(url, http.Header{"Origin": {"http://elsewhere.example"}}); err == nil {
		t.Fatal("an upgrade from a foreign page was relayed")
	}
	if got := metric(t, p.a, "wasmkeep_http_origin_refused_total"); got != 1 {
		t.Fatalf("A refused %v origins, want 1", got)
	}
	if got := forwards(t, p.a, "websocket", "ok"); got != 3 {
		t.Errorf("A counted %v relayed upgrades answered by B, want 3", got)
	}
	c.Send("still")
	if got := c.ReadText(); got != "still" {
		t.Fatalf("the first socket after the refusals: %q", got)
	}
	// B stopping closes the socket with 1012, through A.
	closed := answerClose(t, c, abi.CloseServiceRestart)
	stop(t, p.b)
	closed()
	waitFor(t, "the relay to end", func() bool { return metric(t, p.a, "wasmkeep_cluster_relayed_sockets") == 0 })
}

// TestPeerHeadersRefused: a request with node-to-node headers it cannot
// back is 403, to a member of the cluster and to a node of none.
func TestPeerHeadersRefused(t *testing.T) {
	p := startPair(t, Config{}, Config{})
	solo := startNode(t, Config{})
	for _, c := range []struct {
		name   string
		header http.Header
	}{
		{"forged", http.Header{server.PeerHeader: {"n1"}, server.PeerTimeHeader: {"1"}, server.PeerSigHeader: {"00"}}},
		{"unsigned", http.Header{server.PeerHeader: {"n1"}}},
		{"client only", http.Header{server.PeerClientHeader: {"127.0.0.1:1"}}},
	} {
		for _, n := range []*Node{p.b, solo} {
			req, _ := http.NewRequest("GET", n.URL()+"/actor/echo/x", nil)
			req.Header = c.header
			if r := doRequest(t, req); r.Status != http.StatusForbidden || !strings.Contains(r.Body, "refused: ") {
				t.Errorf("%s to %s: %d %q", c.name, n.Addr(), r.Status, r.Body)
			}
		}
	}
	if got := metric(t, p.b, "wasmkeep_cluster_peer_refused_total"); got != 3 {
		t.Errorf("B counted %v refused peer requests, want 3", got)
	}
}

// TestForwardNeverBounces: A forwards a room to B, and B, whose view
// differs, routes it back to A: B answers 503 with Retry-After rather
// than forwarding a forwarded request, and A counts the bounce.
func TestForwardNeverBounces(t *testing.T) {
	p := startPair(t, Config{}, Config{})
	p.onB("moved")
	p.placeB.set("moved", rooms.Route{Kind: rooms.RouteElsewhere, Node: "n1", Address: p.a.Addr()})
	r := do(t, "GET", p.a.URL()+"/actor/echo/moved", nil)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || !strings.Contains(r.Body, "the room moved") {
		t.Fatalf("a room that moved: %d %q (Retry-After %q)", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	if got := forwards(t, p.a, "http", "bounced"); got != 1 {
		t.Errorf("A counted %v bounces, want 1", got)
	}
	for _, outcome := range []string{"ok", "bounced", "error", "unreachable"} {
		if got := forwards(t, p.b, "http", outcome); got != 0 {
			t.Errorf("B forwarded (%s: %v)", outcome, got)
		}
	}
	if got := p.placeA.times("moved"); got != 1 {
		t.Errorf("A routed the room %d times: the request came back", got)
	}
}

// TestForwardUnreachable: a forward to a node that refuses connections
// tells the membership, which may have the room elsewhere by then; a node
// still unreachable is 503 with Retry-After.
func TestForwardUnreachable(t *testing.T) {
	p := startPair(t, Config{}, Config{})
	dead := rooms.Route{Kind: rooms.RouteElsewhere, Node: "n3", Address: testenv.FreeAddr(t)}
	p.placeA.set("dead", dead)
	r := do(t, "POST", p.a.URL()+"/actor/echo/dead", []byte("body"))
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || !strings.Contains(r.Body, "n3 cannot be reached") {
		t.Fatalf("a room on an unreachable node: %d %q", r.Status, r.Body)
	}
	if got := p.memberA.calls(); len(got) != 1 || got[0] != "n3" {
		t.Fatalf("Unreachable calls: %v, want [n3]", got)
	}
	if got := forwards(t, p.a, "http", "unreachable"); got != 1 {
		t.Errorf("A counted %v unreachable forwards, want 1", got)
	}
	if res := wsDial(t, p.a.URL()+"/actor/echo/dead", dialOpts{}); res.status != http.StatusServiceUnavailable || res.retryAfter == "" {
		t.Errorf("an upgrade for a room on an unreachable node: %d (Retry-After %q)", res.status, res.retryAfter)
	}
	if got := forwards(t, p.a, "websocket", "unreachable"); got != 1 {
		t.Errorf("A counted %v unreachable relays, want 1", got)
	}

	// The membership finds the node dead and B has the room by the next
	// route: served there, body and all.
	p.placeA.set("revived", dead)
	p.memberA.onUnreachable = func(node string) {
		if node == "n3" {
			p.onB("revived")
		}
	}
	r = do(t, "POST", p.a.URL()+"/actor/echo/revived/p", []byte("body"))
	if r.Status != 200 || !strings.Contains(r.Body, "path /p") || !strings.HasSuffix(r.Body, "body body") {
		t.Fatalf("a room moved off an unreachable node: %d %q", r.Status, r.Body)
	}
	if got := p.memberA.calls(); len(got) != 3 || got[2] != "n3" {
		t.Fatalf("Unreachable calls: %v", got)
	}
}

// TestForwardMetricsDocumented: docs/metrics.md's Cluster section lists
// what a member exports once it has forwarded a request and relayed a
// socket.
func TestForwardMetricsDocumented(t *testing.T) {
	p := startPair(t, Config{}, Config{})
	p.onB("away")
	expect(t, 200, "GET", p.a.URL()+"/actor/echo/away", nil)
	c := wstest.Dial(t, p.a.URL()+"/actor/echo/away")
	if got := c.ReadText(); !strings.HasPrefix(got, "open ") {
		t.Fatalf("greeting: %q", got)
	}
	exported := exportedMetrics(p.a)
	// A cluster member's own metrics: a room acquired and released.
	cn := startNode(t, Config{Bucket: store.NewMem(), Cluster: testCluster("n1")})
	putClass(t, cn, "counter", "./examples/counter")
	expect(t, 200, "POST", cn.URL()+"/actor/counter/c", nil)
	hibernate(t, cn, "counter", "c")
	for name := range exportedMetrics(cn) {
		exported[name] = true
	}
	checkDocumented(t, exported, documentedMetrics(t), func(section string) bool { return section == clusterSection })
}

// ServeCall: this fake takes no calls from other nodes.
func (m *member) ServeCall(context.Context, []byte) (calls.Result, error) {
	return calls.Fail(abi.StatusRefused, "no calls here"), nil
}
