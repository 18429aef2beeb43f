package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

var testSecret = []byte("cluster secret of the tests")

// fakeMember is a ClusterMember that records what it is asked and
// answers its status as set.
type fakeMember struct {
	mu        sync.Mutex
	serveCall func(wire []byte) (calls.Result, error)
	status    ClusterNode
	err       error  // what Drain, Move, Take and Fence return
	movedBy   string // the node a Move says holds the room then, if not its target
	calls     []string
	// unseen are leases in the bucket the view has not listed yet
	// (Peer finds them).
	unseen map[string]ClusterPeer
	// newer are leases in the bucket newer than the view's (Peer reads
	// the bucket, and finds them first).
	newer map[string]ClusterPeer
	// gone are the nodes Gone reports fenced.
	gone map[string]bool
	// notReady is what Ready returns.
	notReady error
	// where is where Where places rooms; reads, what it was last asked
	// to read at most.
	where map[rooms.Key]RoomPlace
	reads int
}

func (m *fakeMember) Status() ClusterNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.status
	n.Holds, n.Pending, n.Peers = slices.Clone(n.Holds), slices.Clone(n.Pending), slices.Clone(n.Peers)
	return n
}

func (m *fakeMember) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.notReady
}

func (m *fakeMember) setReady(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.notReady = err
}

func (m *fakeMember) record(call string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, call)
	return m.err
}

func (m *fakeMember) Drain(on bool) error {
	if err := m.record(fmt.Sprintf("drain %v", on)); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Draining = on
	return nil
}

func (m *fakeMember) Move(_ context.Context, key rooms.Key, to string) (string, error) {
	err := m.record("move " + key.String() + " " + to)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.movedBy != "" {
		return m.movedBy, err
	}
	return to, err
}

func (m *fakeMember) Take(_ context.Context, key rooms.Key) error {
	return m.record("take " + key.String())
}

func (m *fakeMember) FenceNode(_ context.Context, node string) error {
	return m.record("fence " + node)
}

func (m *fakeMember) Gone(node string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gone[node]
}

func (m *fakeMember) Dispatch(context.Context, rooms.Key, bool, func(context.Context, string, string) bool) ClusterRoute {
	return ClusterRoute{Serve: true}
}

func (m *fakeMember) Where(_ context.Context, keys []rooms.Key, reads int) map[rooms.Key]RoomPlace {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads = reads
	out := map[rooms.Key]RoomPlace{}
	for _, k := range keys {
		if p, ok := m.where[k]; ok {
			out[k] = p
		}
	}
	return out
}

func (m *fakeMember) Peer(_ context.Context, node string) (ClusterPeer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.newer[node]; ok {
		return p, true
	}
	if p, ok := findPeer(m.status, node); ok {
		return p, true
	}
	p, ok := m.unseen[node]
	return p, ok
}

func (m *fakeMember) set(f func(n *ClusterNode)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.status)
}

func (m *fakeMember) asked() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// testNode is a Server with a cluster, served on loopback.
type testNode struct {
	name   string
	member *fakeMember
	srv    *Server
	http   *httptest.Server
}

func (n *testNode) addr() string { return n.http.Listener.Addr().String() }

// newTestServer builds a whole Server over a memory store.
func newTestServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	return newTestServerOn(t, cfg, store.NewMem())
}

// newTestServerOn builds a whole Server over bucket.
func newTestServerOn(t *testing.T, cfg Config, bucket store.Bucket) *Server {
	t.Helper()
	reg := classes.New(bucket, nil, 0)
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
	t.Cleanup(func() {
		s.Close()
		hub.Close()
		_ = mgr.Close(context.Background())
	})
	return s
}

// startNode serves a node named name of a cluster with secret.
func startNode(t *testing.T, name string, secret []byte) *testNode {
	t.Helper()
	m := &fakeMember{}
	n := &testNode{name: name, member: m}
	n.srv = newTestServer(t, Config{Cluster: &Cluster{Node: name, Secret: secret, Member: m}})
	n.http = httptest.NewServer(n.srv)
	t.Cleanup(n.http.Close)
	m.set(func(s *ClusterNode) {
		*s = ClusterNode{Node: name, Instance: "i-" + name, Address: n.addr(), Phase: "active", LeaseValid: true, ValidForMS: 9000}
	})
	return n
}

// knows makes n's view list the other nodes' leases as live.
func (n *testNode) knows(others ...*testNode) {
	n.member.set(func(s *ClusterNode) {
		for _, o := range others {
			s.Peers = append(s.Peers, ClusterPeer{Node: o.name, Instance: "i-" + o.name, Address: o.addr(), State: "live"})
		}
	})
}

// call sends an admin request (as the CLI does) and decodes the answer.
func call(t *testing.T, n *testNode, method, path, body string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, n.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(AdminHeader, "1")
	return send(t, req, out)
}

func send(t *testing.T, req *http.Request, out any) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", req.Method, req.URL, err, data)
		}
	}
	return resp.StatusCode, string(data)
}

// expectStatus fails unless a call answered want with msg in its body.
func expectStatus(t *testing.T, what string, status int, body string, want int, msg string) {
	t.Helper()
	var e struct{ Error string }
	if json.Unmarshal([]byte(body), &e) == nil && e.Error != "" {
		body = e.Error
	}
	if status != want || !strings.Contains(body, msg) {
		t.Fatalf("%s: HTTP %d %s, want %d with %q", what, status, strings.TrimSpace(body), want, msg)
	}
}

// hangingAddr is a loopback server that never answers, until the test
// ends.
func hangingAddr(t *testing.T) string {
	t.Helper()
	done := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}))
	t.Cleanup(func() { close(done); hs.Close() })
	return hs.Listener.Addr().String()
}

// TestClusterStatus: GET /admin/cluster shows this node and every live
// peer, each asked with a signed call; a peer that refuses the
// connection and one that never answers appear with their lease's facts
// and an error, within the status timeout; peers whose lease ended are
// not asked.
func TestClusterStatus(t *testing.T) {
	n1, n2 := startNode(t, "n1", testSecret), startNode(t, "n2", testSecret)
	n1.knows(n2)
	n1.member.set(func(s *ClusterNode) {
		s.Holds = []ClusterRoom{{Class: "counter", Name: "a", Generation: 3}}
		s.Peers = append(s.Peers,
			ClusterPeer{Node: "n3", Instance: "i-n3", Address: testenv.FreeAddr(t), State: "live", Draining: true},
			ClusterPeer{Node: "n4", Instance: "i-n4", Address: hangingAddr(t), State: "live"},
			ClusterPeer{Node: "n5", Instance: "i-n5", Address: testenv.FreeAddr(t), State: "fenced"})
	})
	n2.member.set(func(s *ClusterNode) {
		s.Draining = true
		s.Pending = []ClusterRoom{{Class: "chat", Name: "lobby", Generation: 7}}
	})

	var view ClusterView
	start := time.Now()
	status, body := call(t, n1, "GET", "/admin/cluster", "", &view)
	took := time.Since(start)
	if status != 200 {
		t.Fatalf("GET /admin/cluster: %d %s", status, body)
	}
	if took > peerStatusTimeout+time.Second {
		t.Errorf("the status took %v with a peer that never answers; each peer has %v", took, peerStatusTimeout)
	}
	var names []string
	for _, n := range view.Nodes {
		names = append(names, n.Node)
	}
	if !slices.Equal(names, []string{"n1", "n2", "n3", "n4"}) {
		t.Fatalf("nodes %v, want n1 (this one), then the live peers n2, n3, n4 in order; body:\n%s", names, body)
	}
	if view.Node.Node != "n1" || len(view.Node.Peers) != 4 || len(view.Nodes[0].Holds) != 1 || view.Nodes[0].Holds[0].Generation != 3 {
		t.Fatalf("this node's view: %+v", view.Node)
	}
	if got := view.Nodes[1]; got.Error != "" || !got.Draining || got.Phase != "active" || len(got.Pending) != 1 || got.Pending[0].Name != "lobby" {
		t.Fatalf("n2 as it answered: %+v", got)
	}
	for _, i := range []int{2, 3} {
		got := view.Nodes[i]
		if got.Error == "" || !strings.Contains(got.Error, "cannot reach node "+got.Node) || got.Instance != "i-"+got.Node || got.Address == "" {
			t.Fatalf("%s cannot be asked: %+v", got.Node, got)
		}
	}
	if e := view.Nodes[3].Error; !strings.HasSuffix(e, "no answer within "+peerStatusTimeout.String()) {
		t.Errorf("n4 never answers: %q", e)
	}
	if e := view.Nodes[2].Error; !strings.Contains(e, "connection refused") || strings.Contains(e, "Get ") {
		t.Errorf("n3 refuses connections: %q", e)
	}
	if !view.Nodes[2].Draining {
		t.Errorf("n3's lease says draining; the status lost it: %+v", view.Nodes[2])
	}
	if !strings.Contains(body, `"holds": []`) {
		t.Errorf("a node's empty lists should be [] rather than null:\n%s", body)
	}

	// ?local=1: this node only, no peer asked.
	view = ClusterView{}
	start = time.Now()
	if status, body := call(t, n1, "GET", "/admin/cluster?local=1", "", &view); status != 200 || len(view.Nodes) != 1 || view.Nodes[0].Node != "n1" {
		t.Fatalf("?local=1: %d %s", status, body)
	}
	if took := time.Since(start); took > peerStatusTimeout/2 {
		t.Errorf("?local=1 took %v: it asked the peers", took)
	}

	// A peer at whose address another node answers is not taken for it.
	n1.member.set(func(s *ClusterNode) { s.Peers = []ClusterPeer{{Node: "n9", Address: n2.addr(), State: "live"}} })
	view = ClusterView{}
	call(t, n1, "GET", "/admin/cluster", "", &view)
	if len(view.Nodes) != 2 || !strings.Contains(view.Nodes[1].Error, `answered as node "n2"`) {
		t.Fatalf("n9's lease names n2's address: %+v", view.Nodes)
	}
}

// TestClusterDrain: a drain of this node is the member's; of another,
// a signed call to it; refusals of unknown and dead nodes and of bodies
// that are not the JSON expected.
func TestClusterDrain(t *testing.T) {
	n1, n2 := startNode(t, "n1", testSecret), startNode(t, "n2", testSecret)
	n1.knows(n2)
	n1.member.set(func(s *ClusterNode) {
		s.Peers = append(s.Peers, ClusterPeer{Node: "n3", Address: testenv.FreeAddr(t), State: "released"})
	})

	var got ClusterNode
	if status, body := call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n1"}`, &got); status != 200 || got.Node != "n1" || !got.Draining {
		t.Fatalf("drain n1 on n1: %d %s", status, body)
	}
	got = ClusterNode{}
	if status, body := call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n2"}`, &got); status != 200 || got.Node != "n2" || !got.Draining {
		t.Fatalf("drain n2 on n1: %d %s", status, body)
	}
	call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n2","off":true}`, &got)
	if got.Draining {
		t.Fatalf("drain n2 off: %+v", got)
	}
	if a, b := n1.member.asked(), n2.member.asked(); !slices.Equal(a, []string{"drain true"}) || !slices.Equal(b, []string{"drain true", "drain false"}) {
		t.Fatalf("n1 was asked %q, n2 %q", a, b)
	}

	status, body := call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n7"}`, nil)
	expectStatus(t, "unknown node", status, body, 404, "no node named n7 in the cluster")
	status, body = call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n3"}`, nil)
	expectStatus(t, "released node", status, body, 409, "n3's lease is released")
	status, body = call(t, n1, "POST", "/admin/cluster/drain", `{}`, nil)
	expectStatus(t, "no node", status, body, 400, "node: the name of the node to drain is missing")
	status, body = call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n1",`, nil)
	expectStatus(t, "broken JSON", status, body, 400, "not the JSON expected")
	status, body = call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n1","of":true}`, nil)
	expectStatus(t, "unknown field", status, body, 400, `unknown field "of"`)
	status, body = call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n1"} {"node":"n2"}`, nil)
	expectStatus(t, "two values", status, body, 400, "more than one JSON value")
	status, body = call(t, n1, "POST", "/admin/cluster/drain", `{"node":"`+strings.Repeat("n", maxPeerBody)+`"}`, nil)
	expectStatus(t, "huge body", status, body, 413, "over the limit")
	if a := n1.member.asked(); len(a) != 1 {
		t.Fatalf("refused drains reached the member: %q", a)
	}

	// The member's failure, with the status it gives.
	n2.member.mu.Lock()
	n2.member.err = codedError{503, "cluster: the bucket does not answer"}
	n2.member.mu.Unlock()
	status, body = call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n2"}`, nil)
	expectStatus(t, "failing peer member", status, body, 502, "the bucket does not answer")
	n1.member.mu.Lock()
	n1.member.err = errors.New("cluster: this node's lease is not valid")
	n1.member.mu.Unlock()
	status, body = call(t, n1, "POST", "/admin/cluster/drain", `{"node":"n1"}`, nil)
	expectStatus(t, "failing member", status, body, 409, "draining node n1: this node's lease is not valid")
}

// codedError is a member's error that gives its HTTP status.
type codedError struct {
	status int
	msg    string
}

func (e codedError) Error() string   { return e.msg }
func (e codedError) HTTPStatus() int { return e.status }

// TestClusterMove: a move goes to the room's holder, found by asking the
// peers, and is refused for a room nobody holds and a target that cannot
// take it.
func TestClusterMove(t *testing.T) {
	n1, n2, n3 := startNode(t, "n1", testSecret), startNode(t, "n2", testSecret), startNode(t, "n3", testSecret)
	n1.knows(n2, n3)
	n1.member.set(func(s *ClusterNode) {
		s.Holds = []ClusterRoom{{Class: "counter", Name: "here", Generation: 1}}
		s.Peers = append(s.Peers, ClusterPeer{Node: "n4", Address: testenv.FreeAddr(t), State: "fenced"})
	})
	n3.member.set(func(s *ClusterNode) { s.Holds = []ClusterRoom{{Class: "counter", Name: "there one", Generation: 5}} })

	var got ClusterMove
	status, body := call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"there one","to":"n2"}`, &got)
	if status != 200 || got != (ClusterMove{Class: "counter", Name: "there one", From: "n3", To: "n2", Moved: true}) {
		t.Fatalf("move of n3's room: %d %s", status, body)
	}
	if a := n3.member.asked(); !slices.Equal(a, []string{"move counter/there one n2"}) {
		t.Fatalf("n3 was asked %q", a)
	}
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"here","to":"n3"}`, &got)
	if status != 200 || got.From != "n1" || !got.Moved {
		t.Fatalf("move of n1's room: %d %s", status, body)
	}
	if a := n1.member.asked(); !slices.Equal(a, []string{"move counter/here n3"}) {
		t.Fatalf("n1 was asked %q", a)
	}
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"there one","to":"n3"}`, &got)
	if status != 200 || got.Moved || got.From != "n3" {
		t.Fatalf("move to the holder itself: %d %s", status, body)
	}

	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"nowhere","to":"n2"}`, nil)
	expectStatus(t, "room held nowhere", status, body, 409, "room counter/nowhere is held by no node")
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"here","to":"n9"}`, nil)
	expectStatus(t, "unknown target", status, body, 404, "no node named n9")
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"here","to":"n4"}`, nil)
	expectStatus(t, "fenced target", status, body, 409, "n4's lease is fenced")
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"Counter!","name":"here","to":"n2"}`, nil)
	expectStatus(t, "bad class", status, body, 400, "invalid class name")
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"a\u0000b","to":"n2"}`, nil)
	expectStatus(t, "bad room name", status, body, 400, "invalid room name")
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"here"}`, nil)
	expectStatus(t, "no target", status, body, 400, "to: the name of the node")
	n1.member.set(func(s *ClusterNode) {
		for i := range s.Peers {
			s.Peers[i].Draining = s.Peers[i].Node == "n2"
		}
	})
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"here","to":"n2"}`, nil)
	expectStatus(t, "draining target", status, body, 409, "node n2 is draining")

	// The holder's refusal is passed on, naming it.
	n3.member.mu.Lock()
	n3.member.err = errors.New("cluster: the room is not held here")
	n3.member.mu.Unlock()
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"there one","to":"n1"}`, nil)
	expectStatus(t, "holder refuses", status, body, 409, "node n3: moving room counter/there one: the room is not held here")
	if a := n1.member.asked(); len(a) != 1 {
		t.Fatalf("refused moves reached n1's member: %q", a)
	}
}

// TestClusterMoveToANodeJustUndrained: a target that the view says
// drains has its lease read before the move is refused: the view reads a
// peer's lease once a TTL, and the undrain may have landed since. (Issue
// 28 §4: `cluster move --to n2` right after `cluster drain --off n2` was
// refused with "node n2 is draining" for 6 to 9 s.)
func TestClusterMoveToANodeJustUndrained(t *testing.T) {
	n1, n2 := startNode(t, "n1", testSecret), startNode(t, "n2", testSecret)
	n1.knows(n2)
	n1.member.set(func(s *ClusterNode) {
		s.Holds = []ClusterRoom{{Class: "counter", Name: "here", Generation: 1}}
		s.Peers[0].Draining = true
	})
	n1.member.mu.Lock()
	n1.member.newer = map[string]ClusterPeer{"n2": {Node: "n2", Instance: "i-n2", Address: n2.addr(), State: "live", Draining: true}}
	n1.member.mu.Unlock()
	status, body := call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"here","to":"n2"}`, nil)
	expectStatus(t, "a target whose lease says it drains", status, body, 409, "node n2 is draining")

	n1.member.mu.Lock()
	n1.member.newer["n2"] = ClusterPeer{Node: "n2", Instance: "i-n2", Address: n2.addr(), State: "live"}
	n1.member.mu.Unlock()
	var got ClusterMove
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"here","to":"n2"}`, &got)
	if status != 200 || got != (ClusterMove{Class: "counter", Name: "here", From: "n1", To: "n2", Moved: true}) {
		t.Fatalf("a move to a node whose lease says it takes rooms again, the view behind: %d %s", status, body)
	}
	if a := n1.member.asked(); !slices.Equal(a, []string{"move counter/here n2"}) {
		t.Fatalf("n1 was asked %q", a)
	}
}

// TestClusterMoveOutcomes: a move that goes on in the background is
// answered 202 with what it waits on, through the node asked too; one
// that another node took first says so, not moved; and a room both held
// on one node and listed moving on another (the end of a move) is asked
// of its holder.
func TestClusterMoveOutcomes(t *testing.T) {
	n1, n2, n3 := startNode(t, "n1", testSecret), startNode(t, "n2", testSecret), startNode(t, "n3", testSecret)
	n1.knows(n2, n3)
	n1.member.set(func(s *ClusterNode) { s.Holds = []ClusterRoom{{Class: "counter", Name: "here", Generation: 1}} })
	n3.member.set(func(s *ClusterNode) { s.Parked = []ClusterRoom{{Class: "counter", Name: "there", Generation: 2}} })

	n1.member.mu.Lock()
	n1.member.err = fmt.Errorf("%w: the release of the room's record has not landed yet (pending)", ErrMoveUnderWay)
	n1.member.mu.Unlock()
	var got ClusterMove
	status, body := call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"here","to":"n2"}`, &got)
	want := ClusterMove{Class: "counter", Name: "here", From: "n1", To: "n2", UnderWay: true, Note: "the release of the room's record has not landed yet (pending)"}
	if status != 202 || got != want {
		t.Fatalf("a move under way here: %d %s", status, body)
	}
	n3.member.mu.Lock()
	n3.member.err = fmt.Errorf("%w: node n2 did not take the room yet", ErrMoveUnderWay)
	n3.member.mu.Unlock()
	got = ClusterMove{}
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"there","to":"n2"}`, &got)
	if status != 202 || !got.UnderWay || got.Moved || got.From != "n3" || got.Note != "node n2 did not take the room yet" {
		t.Fatalf("a move under way on the node asked: %d %s", status, body)
	}

	n3.member.mu.Lock()
	n3.member.err, n3.member.movedBy = nil, "n1"
	n3.member.mu.Unlock()
	got = ClusterMove{}
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"there","to":"n2"}`, &got)
	if status != 200 || got.Moved || got.TakenBy != "n1" || !strings.Contains(got.Note, "node n1 took the room first") {
		t.Fatalf("a move that another node took first: %d %s", status, body)
	}

	// The end of a move of "there" from n2 to n3 (n2 is asked first):
	// n2 lists it moving, n3 holds it. A move to n1 is asked of n3.
	n2.member.set(func(s *ClusterNode) { s.Moving = []ClusterMoving{{Class: "counter", Name: "there", To: "n3"}} })
	n3.member.set(func(s *ClusterNode) {
		s.Parked, s.Holds = nil, []ClusterRoom{{Class: "counter", Name: "there", Generation: 3}}
	})
	n3.member.mu.Lock()
	n3.member.movedBy = ""
	n3.member.mu.Unlock()
	before := len(n2.member.asked())
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"there","to":"n1"}`, &got)
	if status != 200 || got.From != "n3" || !got.Moved {
		t.Fatalf("a room held on n3 and moving on n2: %d %s", status, body)
	}
	if a := n2.member.asked(); len(a) != before {
		t.Errorf("the node moving the room away was asked %q", a[before:])
	}
	// Only listed moving: asked of the mover, to go on.
	n3.member.set(func(s *ClusterNode) { s.Holds = nil })
	status, body = call(t, n1, "POST", "/admin/cluster/move", `{"class":"counter","name":"there","to":"n3"}`, &got)
	if status != 200 || got.From != "n2" {
		t.Fatalf("a room only listed moving: %d %s", status, body)
	}
}

// TestClusterFence: a fence of a dead node is the member's; this node,
// an unknown node and a node that still answers are refused.
func TestClusterFence(t *testing.T) {
	n1, n2 := startNode(t, "n1", testSecret), startNode(t, "n2", testSecret)
	n1.knows(n2)
	n1.member.set(func(s *ClusterNode) {
		s.Peers = append(s.Peers, ClusterPeer{Node: "n3", Instance: "i-n3", Address: testenv.FreeAddr(t), State: "live"})
	})
	status, body := call(t, n1, "POST", "/admin/cluster/fence", `{"node":"n1"}`, nil)
	expectStatus(t, "fence this node", status, body, 400, "cannot fence itself")
	status, body = call(t, n1, "POST", "/admin/cluster/fence", `{"node":"n8"}`, nil)
	expectStatus(t, "fence an unknown node", status, body, 404, "no node named n8")
	status, body = call(t, n1, "POST", "/admin/cluster/fence", `{"node":"n2"}`, nil)
	expectStatus(t, "fence a running node", status, body, 409, "its process is running")
	if a := n1.member.asked(); len(a) != 0 {
		t.Fatalf("refused fences reached the member: %q", a)
	}
	var got map[string]any
	if status, body := call(t, n1, "POST", "/admin/cluster/fence", `{"node":"n3"}`, &got); status != 200 || got["fenced"] != true || got["instance"] != "i-n3" {
		t.Fatalf("fence of a dead node: %d %s", status, body)
	}
	if a := n1.member.asked(); !slices.Equal(a, []string{"fence n3"}) {
		t.Fatalf("n1 was asked %q", a)
	}
	// A node that joined since n1 last listed the leases is read from
	// the bucket.
	n1.member.mu.Lock()
	n1.member.unseen = map[string]ClusterPeer{"n4": {Node: "n4", Instance: "i-n4", Address: testenv.FreeAddr(t), State: "live"}}
	n1.member.mu.Unlock()
	if status, body := call(t, n1, "POST", "/admin/cluster/fence", `{"node":"n4"}`, &got); status != 200 || got["instance"] != "i-n4" {
		t.Fatalf("fence of a node not yet in the view: %d %s", status, body)
	}
}

// peerRequest is a request to n's peer endpoint, signed as from with
// secret (nil: unsigned).
func peerRequest(t *testing.T, n *testNode, method, path, body string, from string, secret []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, n.http.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != nil {
		signPeer(req, secret, from, time.Now())
	}
	return req
}

// TestPeerEndpoints: only a request signed with the cluster's secret
// reaches a peer endpoint; its body is bounded and checked.
func TestPeerEndpoints(t *testing.T) {
	n := startNode(t, "n1", testSecret)
	var got ClusterNode
	if status, body := send(t, peerRequest(t, n, "GET", "/cluster/v1/status", "", "n2", testSecret), &got); status != 200 || got.Node != "n1" {
		t.Fatalf("signed status: %d %s", status, body)
	}
	status, body := send(t, peerRequest(t, n, "GET", "/cluster/v1/status", "", "", nil), nil)
	expectStatus(t, "unsigned status", status, body, 403, "a node-to-node request needs all of")
	status, body = send(t, peerRequest(t, n, "POST", "/cluster/v1/drain", `{}`, "n2", []byte("another secret")), nil)
	expectStatus(t, "drain signed with another secret", status, body, 403, "signature does not match")
	req := peerRequest(t, n, "POST", "/cluster/v1/take", `{"class":"counter","name":"a"}`, "n2", testSecret)
	req.Header.Set(PeerTimeHeader, fmt.Sprint(time.Now().Add(-time.Hour).UnixMilli()))
	status, body = send(t, req, nil)
	expectStatus(t, "old take", status, body, 403, "off by more than")
	// The signature covers the URI: a query added after signing breaks it.
	req = peerRequest(t, n, "POST", "/cluster/v1/take", `{"class":"counter","name":"a"}`, "n2", testSecret)
	req.URL.RawQuery = "x=1"
	status, body = send(t, req, nil)
	expectStatus(t, "altered URI", status, body, 403, "signature does not match")
	if a := n.member.asked(); len(a) != 0 {
		t.Fatalf("refused peer calls reached the member: %q", a)
	}

	status, body = send(t, peerRequest(t, n, "POST", "/cluster/v1/take", `{"class":"counter","name":"a"}`, "n2", testSecret), nil)
	expectStatus(t, "take", status, body, 200, `"node": "n1"`)
	status, body = send(t, peerRequest(t, n, "POST", "/cluster/v1/move", `{"class":"counter","name":"a","to":"n2"}`, "n2", testSecret), nil)
	expectStatus(t, "move", status, body, 200, `"moved": true`)
	status, body = send(t, peerRequest(t, n, "POST", "/cluster/v1/drain", `{"off":false}`, "n2", testSecret), nil)
	expectStatus(t, "drain", status, body, 200, `"draining": true`)
	if a := n.member.asked(); !slices.Equal(a, []string{"take counter/a", "move counter/a n2", "drain true"}) {
		t.Fatalf("the member was asked %q", a)
	}

	for _, c := range []struct{ path, body, msg string }{
		{"/cluster/v1/take", `{"class":"counter"}`, "invalid room name"},
		{"/cluster/v1/take", `{"class":"counter","name":"a","to":"n2"}`, `unknown field "to"`},
		{"/cluster/v1/move", `{"class":"counter","name":"a"}`, "to: the name of the node"},
		{"/cluster/v1/move", `["counter","a"]`, "not the JSON expected"},
		{"/cluster/v1/drain", ``, "no body"},
	} {
		status, body := send(t, peerRequest(t, n, "POST", c.path, c.body, "n2", testSecret), nil)
		expectStatus(t, c.path+" "+c.body, status, body, 400, c.msg)
	}
	status, body = send(t, peerRequest(t, n, "POST", "/cluster/v1/take", strings.Repeat(" ", maxPeerBody+1), "n2", testSecret), nil)
	expectStatus(t, "huge take", status, body, 413, "over the limit")
	if a := n.member.asked(); len(a) != 3 {
		t.Fatalf("refused peer calls reached the member: %q", a)
	}
}

// TestNoCluster: a node without a cluster answers every cluster endpoint
// 404, saying why.
func TestNoCluster(t *testing.T) {
	s := httptest.NewServer(newTestServer(t, Config{}))
	defer s.Close()
	n := &testNode{http: s}
	for _, c := range []struct{ method, path string }{
		{"GET", "/admin/cluster"}, {"POST", "/admin/cluster/drain"}, {"POST", "/admin/cluster/move"}, {"POST", "/admin/cluster/fence"},
	} {
		status, body := call(t, n, c.method, c.path, `{"node":"n1"}`, nil)
		expectStatus(t, c.path, status, body, 404, notInCluster)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/cluster/v1/status"}, {"POST", "/cluster/v1/drain"}, {"POST", "/cluster/v1/move"}, {"POST", "/cluster/v1/take"},
	} {
		// Refused before any handler: a node outside a cluster checks
		// no peer's signature.
		status, body := send(t, peerRequest(t, n, c.method, c.path, `{}`, "n2", testSecret), nil)
		expectStatus(t, c.path, status, body, 403, notInCluster)
	}
}

// TestAdminRefusesPeers: no request with peer headers reaches the admin
// API, /metrics, pprof or the dashboard, signed or not, on either
// listener; the same requests without them do.
func TestAdminRefusesPeers(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate admin %v", separate), func(t *testing.T) {
			s := newTestServer(t, Config{SeparateAdmin: separate, Cluster: &Cluster{Node: "n1", Secret: testSecret, Member: &fakeMember{}}})
			h := http.Handler(s)
			if separate {
				h = s.AdminHandler()
			}
			for _, c := range []struct{ method, path string }{
				{"GET", "/admin/"}, {"GET", "/admin/overview"}, {"GET", "/admin/series"}, {"GET", "/admin/rooms"},
				{"GET", "/admin/classes"}, {"GET", "/admin/cluster?local=1"}, {"POST", "/admin/cluster/drain"},
				{"POST", "/admin/rooms/counter/a/hibernate"}, {"GET", "/metrics"}, {"GET", "/debug/pprof/"},
			} {
				for _, peer := range []string{"", "signed", "name only"} {
					req := httptest.NewRequest(c.method, "http://127.0.0.1:8080"+c.path, bytes.NewReader([]byte(`{"node":"n1"}`)))
					req.RemoteAddr = "127.0.0.1:5000"
					req.Header.Set(AdminHeader, "1")
					switch peer {
					case "signed":
						signPeer(req, testSecret, "n2", time.Now())
					case "name only":
						req.Header.Set(PeerHeader, "n2")
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					// Refused by the admin guard, or, for headers that do
					// not check, before it by the node-to-node check.
					body := rec.Body.String()
					if refused := rec.Code == 403 && (strings.Contains(body, "no node-to-node request") || strings.Contains(body, "a node-to-node request needs")); refused != (peer != "") {
						t.Errorf("%s %s with peer headers %q: HTTP %d %s", c.method, c.path, peer, rec.Code, rec.Body)
					}
				}
			}
		})
	}
}

// TestPeerCallAnswers: what the peer client makes of answers: an error
// message in JSON or text, an answer over its bound, one that is not
// JSON, and a redirect, which it does not follow.
func TestPeerCallAnswers(t *testing.T) {
	var signed sync.Map
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if node, why := verifyPeer(r, testSecret, time.Now()); why == "" {
			signed.Store(r.URL.Path, node)
		}
		switch r.URL.Path {
		case "/json-error":
			jsonError(w, http.StatusConflict, "the room is busy")
		case "/text-error":
			http.Error(w, "bad gateway of some proxy", http.StatusBadGateway)
		case "/big":
			w.Write(bytes.Repeat([]byte("x"), 2000))
		case "/not-json":
			io.WriteString(w, "hello")
		case "/redirect":
			http.Redirect(w, r, "/json-error", http.StatusFound)
		}
	}))
	defer hs.Close()
	s := &Cluster{Node: "n1", Secret: testSecret}
	addr := hs.Listener.Addr().String()
	var out map[string]any
	ctx := context.Background()
	for _, c := range []struct {
		path   string
		status int
		msg    string
	}{
		{"/json-error", 409, "node n2 answered HTTP 409: the room is busy"},
		{"/text-error", 502, "bad gateway of some proxy"},
		{"/big", 200, "an answer over 1000 bytes"},
		{"/not-json", 200, "not the JSON expected"},
		{"/redirect", 302, "HTTP 302"},
	} {
		err := s.call(ctx, "n2", addr, "GET", c.path, nil, &out, time.Second, 1000)
		var pe *peerError
		if !errors.As(err, &pe) || pe.status != c.status || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want HTTP %d and %q", c.path, err, c.status, c.msg)
		}
		if node, _ := signed.Load(c.path); node != "n1" {
			t.Errorf("%s: the call was not signed as n1's", c.path)
		}
	}
	if _, ok := signed.Load("/json-error"); !ok {
		t.Fatal("no call reached the server")
	}
	err := s.call(ctx, "n2", "", "GET", "/x", nil, nil, time.Second, 1000)
	var pu *peerUnreachable
	if !errors.As(err, &pu) || !strings.Contains(err.Error(), "gives no address") {
		t.Errorf("no address: %v", err)
	}
	if err := s.call(ctx, "n2", "ftp://"+addr, "GET", "/x", nil, nil, time.Second, 1000); !errors.As(err, &pu) {
		t.Errorf("an ftp address: %v", err)
	}
	if err := s.call(ctx, "n2", hs.URL+"/", "GET", "/json-error", nil, nil, time.Second, 1000); !strings.Contains(fmt.Sprint(err), "the room is busy") {
		t.Errorf("an address with its scheme: %v", err)
	}
}

// TestAskTake: the target's side of a move, as a member calls it: a
// signed call that reaches the target's Member.Take, whose refusal comes
// back with its message.
func TestAskTake(t *testing.T) {
	n1, n2 := startNode(t, "n1", testSecret), startNode(t, "n2", testSecret)
	ctx := context.Background()
	if err := n1.srv.cfg.Cluster.AskTake(ctx, "n2", n2.addr(), rooms.Key{Class: "counter", Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if a := n2.member.asked(); !slices.Equal(a, []string{"take counter/b"}) {
		t.Fatalf("n2 was asked %q", a)
	}
	n2.member.mu.Lock()
	n2.member.err = errors.New("cluster: this node is draining")
	n2.member.mu.Unlock()
	err := n1.srv.cfg.Cluster.AskTake(ctx, "n2", n2.addr(), rooms.Key{Class: "counter", Name: "c"})
	var pe *peerError
	if !errors.As(err, &pe) || pe.status != 409 || !strings.Contains(err.Error(), "taking room counter/c: this node is draining") {
		t.Fatalf("a refused take: %v", err)
	}
	other := &Cluster{Node: "n1", Secret: []byte("not the cluster's")}
	if err := other.AskTake(ctx, "n2", n2.addr(), rooms.Key{Class: "counter", Name: "d"}); !errors.As(err, &pe) || pe.status != 403 {
		t.Fatalf("a take signed with another secret: %v", err)
	}
}

// ServeCall answers with serveCall, if set; otherwise it takes no calls.
func (m *fakeMember) ServeCall(_ context.Context, wire []byte) (calls.Result, error) {
	m.mu.Lock()
	serve := m.serveCall
	m.mu.Unlock()
	if serve == nil {
		return calls.Fail(abi.StatusRefused, "no calls here"), nil
	}
	return serve(wire)
}
