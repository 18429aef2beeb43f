//go:build unix

package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/wasmkeep/wasmkeep/abi"
	"github.com/wasmkeep/wasmkeep/calls"
	"github.com/wasmkeep/wasmkeep/host/classes"
	"github.com/wasmkeep/wasmkeep/host/rooms"
	"github.com/wasmkeep/wasmkeep/host/server"
	"github.com/wasmkeep/wasmkeep/host/socket"
	"github.com/wasmkeep/wasmkeep/host/store"
	"github.com/wasmkeep/wasmkeep/internal/testenv"
)

// drainMember is a server.ClusterMember whose drain hands over one room
// each time its status is asked, unless stuck.
type drainMember struct {
	mu     sync.Mutex
	status server.ClusterNode
	stuck  bool
	calls  []string
	// places is where Where places rooms.
	places map[rooms.Key]server.RoomPlace
}

func (m *drainMember) Status() server.ClusterNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.status.Draining && !m.stuck {
		switch {
		case len(m.status.Holds) > 0:
			m.status.Pending = append(m.status.Pending, m.status.Holds[0])
			m.status.Holds = m.status.Holds[1:]
		case len(m.status.Pending) > 0:
			m.status.Pending = m.status.Pending[1:]
		}
		m.status.Drained = len(m.status.Holds) == 0 && len(m.status.Pending) == 0
	}
	n := m.status
	n.Holds, n.Pending, n.Peers = slices.Clone(n.Holds), slices.Clone(n.Pending), slices.Clone(n.Peers)
	return n
}

func (m *drainMember) Ready() error { return nil }

func (m *drainMember) call(c string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, c)
}

func (m *drainMember) Drain(on bool) error {
	m.call("drain")
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status.Draining, m.status.Drained = on, false
	return nil
}

func (m *drainMember) Move(_ context.Context, key rooms.Key, to string) (string, error) {
	m.call("move " + key.String() + " " + to)
	return to, nil
}

func (m *drainMember) Take(context.Context, rooms.Key) error { return nil }

func (m *drainMember) FenceNode(_ context.Context, node string) error {
	m.call("fence " + node)
	return nil
}

func (m *drainMember) Gone(string) bool { return false }

func (m *drainMember) Dispatch(context.Context, rooms.Key, bool, func(context.Context, string, string) bool) server.ClusterRoute {
	return server.ClusterRoute{Serve: true}
}

func (m *drainMember) Where(_ context.Context, keys []rooms.Key, _ int) map[rooms.Key]server.RoomPlace {
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

func (m *drainMember) Peer(context.Context, string) (server.ClusterPeer, bool) {
	return server.ClusterPeer{}, false
}

func (m *drainMember) set(n server.ClusterNode) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status = n
}

func (m *drainMember) asked() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// clusterNode serves a node's HTTP surface (a memory store, no classes)
// with the member as its cluster membership, or none if nil.
func clusterNode(t *testing.T, name string, m *drainMember) *httptest.Server {
	t.Helper()
	return clusterNodeOn(t, name, m, store.NewMem())
}

// clusterNodeOn is clusterNode over bucket.
func clusterNodeOn(t *testing.T, name string, m *drainMember, bucket store.Bucket) *httptest.Server {
	t.Helper()
	reg := classes.New(bucket, nil, 0)
	mgr, err := rooms.NewManager(context.Background(), rooms.Config{}, rooms.EngineClasses(reg), bucket, rooms.NewLocal(1))
	if err != nil {
		t.Fatal(err)
	}
	set := metrics.NewSet()
	hub := socket.NewHub(socket.Config{}, set)
	cfg := server.Config{Logger: slog.New(slog.DiscardHandler)}
	if m != nil {
		cfg.Cluster = &server.Cluster{Node: name, Secret: []byte("the tests' secret"), Member: m}
	}
	s := server.New(cfg, reg, mgr, hub, set)
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		s.Close()
		hub.Close()
		_ = mgr.Close(context.Background())
	})
	return hs
}

func hostPort(hs *httptest.Server) string { return hs.Listener.Addr().String() }

// TestClusterCommands: `wasmkeep cluster status|drain|move|fence` against
// a node of a cluster of three (n1; n2, reachable; n3, dead) whose
// membership is a fake.
func TestClusterCommands(t *testing.T) {
	t.Parallel()
	dead := testenv.FreeAddr(t)

	m1, m2 := &drainMember{}, &drainMember{stuck: true}
	n1, n2 := clusterNode(t, "n1", m1), clusterNode(t, "n2", m2)
	m1.set(server.ClusterNode{Node: "n1", Instance: "i-n1", Address: hostPort(n1), Phase: "active", LeaseValid: true, ValidForMS: 9200,
		Holds: []server.ClusterRoom{{Class: "counter", Name: "a", Generation: 3}, {Class: "chat", Name: "lobby", Generation: 8}},
		Peers: []server.ClusterPeer{
			{Node: "n2", Instance: "i-n2", Address: hostPort(n2), State: "live"},
			{Node: "n3", Instance: "i-n3", Address: dead, State: "live"},
		}})
	m2.set(server.ClusterNode{Node: "n2", Instance: "i-n2", Address: hostPort(n2), Phase: "active", LeaseValid: true, ValidForMS: 4000,
		Pending: []server.ClusterRoom{{Class: "counter", Name: "b c", Generation: 5}}})
	run := func(args ...string) result {
		t.Helper()
		words := 2 // cluster VERB
		full := append(append(append([]string(nil), args[:words]...), "--server", n1.URL), args[words:]...)
		return wk(t, nil, full...)
	}
	ok := func(args ...string) string {
		t.Helper()
		r := run(args...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("wasmkeep %s: %v", strings.Join(args, " "), r)
		}
		return r.stdout
	}
	fails := func(code int, want string, args ...string) {
		t.Helper()
		if r := run(args...); r.code != code || r.stdout != "" || !strings.Contains(r.stderr, want) {
			t.Fatalf("wasmkeep %s: want exit code %d and %q on stderr; got %v", strings.Join(args, " "), code, want, r)
		}
	}

	// status: the nodes, the one that could not be asked, the holds.
	out := ok("cluster", "status")
	parts := strings.Split(out, "\n\n")
	if len(parts) != 3 {
		t.Fatalf("cluster status: want the nodes, the errors and the holds:\n%s", out)
	}
	rows := table(t, parts[0], "NODE", "INSTANCE", "ADDRESS", "PHASE", "LEASE", "FOR", "DRAINING", "HOLDS", "PARKED", "PENDING")
	want := [][]string{
		{"n1", "i-n1", hostPort(n1), "active", "valid", "9.2s", "no", "2", "0", "0"},
		{"n2", "i-n2", hostPort(n2), "active", "valid", "4s", "no", "0", "0", "1"},
		{"n3", "i-n3", dead, "?", "?", "-", "no", "?", "?", "?"},
	}
	if !slices.EqualFunc(rows, want, slices.Equal) {
		t.Fatalf("cluster status rows %q, want %q", rows, want)
	}
	if !strings.HasPrefix(parts[1], "n3: cannot reach node n3 at "+dead) {
		t.Fatalf("cluster status: the unreachable node's error:\n%s", parts[1])
	}
	holds := table(t, parts[2], "NODE", "ROOM", "GENERATION", "HOLD")
	wantHolds := [][]string{{"n1", "counter/a", "3", "held"}, {"n1", "chat/lobby", "8", "held"}, {"n2", "counter/b%20c", "5", "release-pending"}}
	if !slices.EqualFunc(holds, wantHolds, slices.Equal) {
		t.Fatalf("cluster status holds %q, want %q", holds, wantHolds)
	}
	var view server.ClusterView
	if err := json.Unmarshal([]byte(ok("cluster", "status", "--json")), &view); err != nil || len(view.Nodes) != 3 || view.Node.Node != "n1" {
		t.Fatalf("cluster status --json: %v %+v", err, view)
	}

	// move, as docs/cluster.md writes it (--to after the room), and fence.
	if got := ok("cluster", "move", "counter", "a", "--to", "n2"); got != "room counter/a moved from node n1 to node n2\n" {
		t.Fatalf("cluster move: %q", got)
	}
	fails(1, "room counter/zzz is held by no node that answered", "cluster", "move", "--to", "n2", "counter", "zzz")
	fails(2, "usage: wasmkeep cluster move", "cluster", "move", "counter", "a")
	if got := ok("cluster", "fence", "n3"); !strings.HasPrefix(got, "node n3 fenced (instance i-n3)") {
		t.Fatalf("cluster fence: %q", got)
	}
	fails(1, "its process is running", "cluster", "fence", "n2")
	fails(1, "cannot fence itself", "cluster", "fence", "n1")
	if got := m1.asked(); !slices.Equal(got, []string{"move counter/a n2", "fence n3"}) {
		t.Fatalf("n1's member was asked %q", got)
	}

	// drain --wait follows the drain to its end; n1 hands over a room
	// each time it is asked.
	out = ok("cluster", "drain", "--wait", "n1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "node n1 draining: 1 room held, 0 records parked, 1 release pending" || lines[len(lines)-1] != "node n1 drained" || len(lines) < 3 {
		t.Fatalf("cluster drain --wait:\n%s", out)
	}
	if got := ok("cluster", "drain", "--off", "n1"); got != "node n1 takes rooms again\n" {
		t.Fatalf("cluster drain --off: %q", got)
	}
	// n2 is stuck: the wait gives up.
	r := run("cluster", "drain", "--wait", "--timeout", "1s", "n2")
	if r.code != 1 || r.stdout != "node n2 draining: 0 rooms held, 0 records parked, 1 release pending\n" ||
		!strings.Contains(r.stderr, "node n2 is not drained after 1s: 0 rooms held, 0 records parked, 1 release pending") {
		t.Fatalf("cluster drain --wait of a node that does not drain: %v", r)
	}
	if got := m2.asked(); !slices.Equal(got, []string{"drain"}) {
		t.Fatalf("n2's member was asked %q", got)
	}
	fails(1, "no node named n7 in the cluster", "cluster", "drain", "n7")
	fails(2, "with --off there is nothing to wait for", "cluster", "drain", "--off", "--wait", "n1")
	fails(2, "--timeout must be more than 0", "cluster", "drain", "--wait", "--timeout", "0s", "n1")
	fails(2, "usage: wasmkeep cluster drain", "cluster", "drain")

	// A node without a cluster says so.
	lone := clusterNode(t, "", nil)
	if r := wk(t, nil, "cluster", "status", "--server", lone.URL); r.code != 1 || !strings.Contains(r.stderr, "this node is not a member of a cluster (HTTP 404)") {
		t.Fatalf("cluster status of a node without a cluster: %v", r)
	}
}

// TestPrintMove: what `cluster move` prints for each outcome.
func TestPrintMove(t *testing.T) {
	base := server.ClusterMove{Class: "chat", Name: "lobby", From: "a", To: "b"}
	for _, c := range []struct {
		edit func(*server.ClusterMove)
		want string
	}{
		{func(m *server.ClusterMove) { m.Moved = true }, "room chat/lobby moved from node a to node b\n"},
		{func(m *server.ClusterMove) { m.From = "b" }, "room chat/lobby is on node b already\n"},
		{func(m *server.ClusterMove) { m.TakenBy, m.Note = "c", "node c took the room first" },
			"room chat/lobby left node a, but node c took it before node b did: node c took the room first\n"},
		{func(m *server.ClusterMove) { m.UnderWay, m.Note = true, "pending" },
			"room chat/lobby is moving from node a to node b, in the background: pending\n(it is finished or given up within 2m0s, or twelve lease times if that is longer; `wasmkeep cluster status` shows it meanwhile)\n"},
	} {
		m := base
		c.edit(&m)
		var out strings.Builder
		printMove(&out, m)
		if out.String() != c.want {
			t.Errorf("%+v printed %q, want %q", m, out.String(), c.want)
		}
	}
}

// TestRoomsWhere: `wasmkeep rooms` of a node of a cluster says where each
// room runs, as the node's GET /admin/rooms does: WHERE (held, parked,
// free) and NODE, "-" for a room whose record it did not read; a node
// outside a cluster has neither column.
func TestRoomsWhere(t *testing.T) {
	t.Parallel()
	bucket := store.NewMem()
	for _, name := range []string{"a", "b", "c", "d"} {
		if _, err := bucket.Put(context.Background(), "rooms/counter/"+name+"/manifest", []byte("not read here"), store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	key := func(name string) rooms.Key { return rooms.Key{Class: "counter", Name: name} }
	m := &drainMember{places: map[rooms.Key]server.RoomPlace{
		key("a"): {Place: server.PlaceHeld, Node: "n2"},
		key("b"): {Place: server.PlaceParked, Node: "n1"},
		key("c"): {Place: server.PlaceFree},
	}}
	n := clusterNodeOn(t, "n1", m, bucket)
	r := wk(t, nil, "rooms", "--server", n.URL)
	if r.code != 0 {
		t.Fatalf("rooms: %v", r)
	}
	rows := table(t, r.stdout, "CLASS", "NAME", "STATE", "WHERE", "NODE", "SOCKETS", "AWAKE", "MEMORY", "LAST-EVENT", "SNAPSHOT", "ALARM")
	var got [][]string
	for _, row := range rows {
		got = append(got, row[1:5])
	}
	want := [][]string{{"a", "hibernated", "held", "n2"}, {"b", "hibernated", "parked", "n1"}, {"c", "hibernated", "free", "-"}, {"d", "hibernated", "-", "-"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rooms: %q, want %q", got, want)
	}

	single := clusterNodeOn(t, "", nil, bucket)
	if r := wk(t, nil, "rooms", "--server", single.URL); r.code != 0 || len(table(t, r.stdout, roomsHeader...)) != 4 {
		t.Fatalf("rooms of a node outside a cluster: %v", r)
	}
}

// ServeCall: this fake takes no calls from other nodes.
func (m *drainMember) ServeCall(context.Context, []byte) (calls.Result, error) {
	return calls.Fail(abi.StatusRefused, "no calls here"), nil
}
